"""Host-side pieces shared by the processes of one machine: the supervisor, its template and
children, the ``orbit`` client and the server's bootstrap.

    framing.py      length-prefixed JSON frames on the supervisor ↔ child sockets
    messages.py     every supervisor ↔ template ↔ child message as a class
    procutil.py     Linux process control: prctl, killpg, kill_tree, /proc child lists
    credentials.py  the credentials file (read, checked and written 0600)

It imports nothing of Orbit's but ``orbit_wire``, so a handler process can load it without
the supervisor's or the client's dependencies (tests/unit/test_layers.py keeps it so).
"""

from .credentials import Credentials, CredentialsFileError, load_credentials, write_credentials

__all__ = ["Credentials", "CredentialsFileError", "load_credentials", "write_credentials"]
