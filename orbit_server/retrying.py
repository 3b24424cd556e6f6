"""Bulk actions by filter, the same for every adapter: a queue's tasks that match a filter
are retried, cancelled or reviewed (or only counted, on a dry run), one page per transaction
on the store thread's normal lane, so the worker lane is served between pages
(services.retries)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from orbit_wire.model import TaskState

from .auth import Principal
from .domain.listing import CANCELLABLE, RETRYABLE, retry_filter
from .parts import ServerParts
from .services.retries import BulkAction, BulkChange

# Tasks one transaction changes, and counts on a dry run (a read only).
RETRY_PAGE: Final = 100
COUNT_PAGE: Final = 500
# Pages one request walks at most: a longer list answers complete=false (ask again).
MAX_PAGES: Final = 2_000
# The states each action takes tasks from when the query names none.
_DEFAULT_STATES: Final[dict[BulkAction, tuple[TaskState, ...]]] = {
    BulkAction.RETRY: RETRYABLE, BulkAction.CANCEL: CANCELLABLE}
# What the answer calls the changed tasks, besides "changed".
_CHANGED_AS: Final = {BulkAction.RETRY: "retried", BulkAction.CANCEL: "cancelled"}


async def retry_matching(parts: ServerParts, principal: Principal, queue_id: str,
                         query: Mapping[str, Any], reason: str | None,
                         dry_run: bool) -> dict[str, Any]:
    """``{"matched", "retried", "skipped", "dry_run", "complete"}`` for the queue's tasks
    that ``query`` (``RETRY_QUERY``'s parameters) selects, created up to now."""
    return await act_on_matching(parts, principal, queue_id, query,
                                 BulkChange(BulkAction.RETRY, reason), dry_run)


async def act_on_matching(parts: ServerParts, principal: Principal, queue_id: str,
                          query: Mapping[str, Any], change: BulkChange,
                          dry_run: bool) -> dict[str, Any]:
    """``{"action", "matched", "changed", "skipped", "dry_run", "complete"}`` (and the
    changed count under the action's own name: ``retried``, ``cancelled``) for the queue's
    tasks that ``query`` (the action's query parameters) selects, created up to now."""
    default = _DEFAULT_STATES.get(change.action, (TaskState.NEEDS_REVIEW,))
    filt = retry_filter(query, COUNT_PAGE if dry_run else RETRY_PAGE, parts.clock(), default)
    service = parts.services.retries
    matched = changed = skipped = 0
    complete = False
    for _ in range(MAX_PAGES):
        page, effects = await parts.store.call(service.act_page, principal, queue_id, filt,
                                               change, dry_run)
        parts.act_on(effects)
        matched += page.matched
        changed += page.retried
        skipped += page.skipped
        if page.after is None:
            complete = True
            break
        filt = replace(filt, after=page.after)
    out: dict[str, Any] = {"action": change.action.value, "matched": matched,
                           "changed": changed, "skipped": skipped, "dry_run": dry_run,
                           "complete": complete}
    if change.action in _CHANGED_AS:
        out[_CHANGED_AS[change.action]] = changed
    return out
