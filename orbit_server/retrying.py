"""Bulk retries, the same for every adapter: a queue's FAILED or CANCELLED tasks that match a
filter run again (or only counted, on a dry run), one page per transaction on the store
thread's normal lane, so the worker lane is served between pages (services.retries)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from .auth import Principal
from .domain.listing import retry_filter
from .parts import ServerParts

# Tasks one transaction retries, and counts on a dry run (a read only).
RETRY_PAGE: Final = 100
COUNT_PAGE: Final = 500
# Pages one request walks at most: a longer list answers complete=false (ask again).
MAX_PAGES: Final = 2_000


async def retry_matching(parts: ServerParts, principal: Principal, queue_id: str,
                         query: Mapping[str, Any], reason: str | None,
                         dry_run: bool) -> dict[str, Any]:
    """``{"matched", "retried", "skipped", "dry_run", "complete"}`` for the queue's tasks
    that ``query`` (``RETRY_QUERY``'s parameters) selects, created up to now."""
    filt = retry_filter(query, COUNT_PAGE if dry_run else RETRY_PAGE, parts.clock())
    service = parts.services.retries
    matched = retried = skipped = 0
    complete = False
    for _ in range(MAX_PAGES):
        page, effects = await parts.store.call(service.retry_page, principal, queue_id, filt,
                                               reason, dry_run)
        parts.act_on(effects)
        matched += page.matched
        retried += page.retried
        skipped += page.skipped
        if page.after is None:
            complete = True
            break
        filt = replace(filt, after=page.after)
    return {"matched": matched, "retried": retried, "skipped": skipped, "dry_run": dry_run,
            "complete": complete}
