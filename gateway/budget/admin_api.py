"""The admin API's budgets, spend reports and audit log (mounted on the `/admin` router, behind the
admin key like the key endpoints).

    GET    /admin/budgets                         every run-time budget
    GET    /admin/budgets/{level}?<target>        one (404 if none)
    PUT    /admin/budgets/{level}?<target>        set it (body: limits, e.g. {"usd_per_month": 500})
    PATCH  /admin/budgets/{level}?<target>        change the fields given, keep the others
    DELETE /admin/budgets/{level}?<target>        drop it: the policy's limits apply again
    GET    /admin/spend?group_by=org,tag&from=2026-11-01&to=2026-12-01&interval=day&format=csv
    GET    /admin/audit?limit=100

`level` is key, app, org, tag or end_user; the target is named by query parameters, never by one
joined path segment (an org name may contain `/`): `key=<id>`, `org=<org>`, `org=&app=` (app and
end_user: the limit of each end user of that app), `tag=<tag>`. Every change is written to the audit
log (who, what, before, after) before it is acknowledged; without a database the audit entry goes to
the server log (logger `llmgw.audit`) and `/admin/audit` answers 404. Spend reports need the ledger's
database (`LLMGW_DATABASE_URL`).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable
from typing import Any, Literal, cast

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from gateway.budget.overrides import LEVELS, BudgetLevel, BudgetOverrides, OverridesFull, encode
from gateway.errors import ConflictError, InvalidRequestError, NotFoundError, UpstreamUnavailableError
from gateway.ledger.report import spend_report, to_csv
from gateway.ledger.store import SpendStore
from gateway.tenancy.admin import read_model
from ratelimit.keys import scope_id
from ratelimit.model import TAG_PATTERN, LevelLimits

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")  # gateway.config.Name
_KEY_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TAG = re.compile(TAG_PATTERN)
_audit_log = logging.getLogger("llmgw.audit")


def _param(request: Request, name: str, pattern: re.Pattern[str]) -> str:
    value = request.query_params.get(name)
    if value is None:
        raise InvalidRequestError(f"missing query parameter '{name}'", param=name)
    if not pattern.match(value):
        raise InvalidRequestError(f"invalid '{name}'", param=name)
    return value


def target_of(level: str, request: Request) -> tuple[BudgetLevel, str, str]:
    """(level, the store's name of the target, how the audit log names it) from the query."""
    if level not in LEVELS:
        raise InvalidRequestError(
            f"unknown budget level '{level[:32]}' (levels: {', '.join(LEVELS)})", param="level"
        )
    lv: BudgetLevel = level
    if lv == "key":
        key = _param(request, "key", _KEY_ID)
        return lv, key, f"key {key}"
    if lv == "org":
        org = _param(request, "org", _NAME)
        return lv, org, f"org {org}"
    if lv == "tag":
        tag = _param(request, "tag", _TAG)
        return lv, tag, f"tag {tag}"
    org, app = _param(request, "org", _NAME), _param(request, "app", _NAME)
    # App and end-user budgets are keyed like the limiter's app scope: escaped, then joined.
    return lv, scope_id(org, app), f"{lv} {org} / {app}"


def _dump(limits: LevelLimits | None) -> dict[str, Any] | None:
    return orjson.loads(encode(limits)) if limits is not None else None


class BudgetsAdmin:
    def __init__(self, overrides: BudgetOverrides, store: Callable[[], SpendStore | None]) -> None:
        """`store`: the database of the audit log and the spend reports, once the app has connected."""
        self._overrides = overrides
        self._store_of = store

    def mount(self, router: APIRouter) -> None:
        router.add_api_route("/budgets", self.list_budgets, methods=["GET"])
        router.add_api_route("/budgets/{level}", self.get_budget, methods=["GET"])
        router.add_api_route("/budgets/{level}", self.put_budget, methods=["PUT"])
        router.add_api_route("/budgets/{level}", self.patch_budget, methods=["PATCH"])
        router.add_api_route("/budgets/{level}", self.delete_budget, methods=["DELETE"])
        router.add_api_route("/spend", self.spend, methods=["GET"])
        router.add_api_route("/audit", self.audit, methods=["GET"])

    async def list_budgets(self) -> JSONResponse:
        await self._overrides.refresh()
        o = self._overrides.current
        data = [
            {"level": level, "name": name, "limits": _dump(limits)}
            for level, entries in (
                ("key", o.key),
                ("app", o.app),
                ("org", o.org),
                ("tag", o.tag),
                ("end_user", o.end_user),
            )
            for name, limits in sorted(entries.items())
        ]
        return JSONResponse({"object": "list", "version": o.version, "data": data})

    def _current(self, level: BudgetLevel, name: str) -> LevelLimits | None:
        o = self._overrides.current
        entries = {"key": o.key, "app": o.app, "org": o.org, "tag": o.tag, "end_user": o.end_user}[level]
        return entries.get(name)

    async def get_budget(self, level: str, request: Request) -> JSONResponse:
        lv, name, what = target_of(level, request)
        await self._overrides.refresh()
        limits = self._current(lv, name)
        if limits is None:
            raise NotFoundError(f"no run-time budget for {what}", code="budget_not_found")
        return JSONResponse({"object": "budget", "level": lv, "target": what, "limits": _dump(limits)})

    async def put_budget(self, level: str, request: Request) -> JSONResponse:
        lv, name, what = target_of(level, request)
        limits = await read_model(request, LevelLimits)
        return await self._change(request, "budget.set", lv, name, what, limits)

    async def patch_budget(self, level: str, request: Request) -> JSONResponse:
        lv, name, what = target_of(level, request)
        change = await read_model(request, LevelLimits)
        await self._overrides.refresh()
        current = self._current(lv, name)
        merged = current.merged(change) if current is not None else change
        return await self._change(request, "budget.update", lv, name, what, merged)

    async def delete_budget(self, level: str, request: Request) -> JSONResponse:
        lv, name, what = target_of(level, request)
        await self._overrides.refresh()
        if self._current(lv, name) is None:
            raise NotFoundError(f"no run-time budget for {what}", code="budget_not_found")
        return await self._change(request, "budget.delete", lv, name, what, None)

    async def _change(
        self, request: Request, action: str, lv: BudgetLevel, name: str, what: str, limits: LevelLimits | None
    ) -> JSONResponse:
        await self._overrides.refresh()
        before = self._current(lv, name)
        actor = f"admin@{request.client.host if request.client is not None else '-'}"
        # Audited first: a change the audit log cannot hold is not made.
        await self._audit(actor, action, what, _dump(before), _dump(limits))
        try:
            await self._overrides.put(lv, name, limits)
        except OverridesFull as exc:
            raise ConflictError(str(exc), code="too_many_budgets") from None
        return JSONResponse(
            {
                "object": "budget",
                "level": lv,
                "target": what,
                "limits": _dump(limits),
                "before": _dump(before),
            }
        )

    async def _audit(
        self,
        actor: str,
        action: str,
        target: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
    ) -> None:
        store = self._store_of()
        if store is None:
            _audit_log.info(
                "%s",
                orjson.dumps(
                    {"actor": actor, "action": action, "target": target, "before": before, "after": after}
                ).decode(),
            )
            return
        try:
            await store.audit(actor, action, target, before, after)
        except Exception as exc:  # noqa: BLE001 - asyncpg and OS errors alike: the database is unavailable
            raise UpstreamUnavailableError(
                "the audit log is unavailable: the change was not made", code="audit_unavailable"
            ) from exc

    def _need_store(self) -> SpendStore:
        store = self._store_of()
        if store is None:
            raise NotFoundError(
                "no spend ledger: set LLMGW_DATABASE_URL and ledger.enabled", code="ledger_not_configured"
            )
        return store

    async def spend(self, request: Request) -> Response:
        store = self._need_store()
        q = request.query_params
        group_by = [g for g in (q.get("group_by") or "").split(",") if g]
        start, end = _date(q.get("from"), "from"), _date(q.get("to"), "to")
        interval = q.get("interval") or None
        fmt = q.get("format", "json")
        if fmt not in ("json", "csv"):
            raise InvalidRequestError("format must be json or csv", param="format")
        try:
            rows = await spend_report(
                store, group_by, start, end, cast(Literal["day", "month"] | None, interval)
            )
        except ValueError as exc:
            raise InvalidRequestError(str(exc)[:300], param="group_by") from None
        except Exception as exc:  # noqa: BLE001 - the database is unavailable
            raise UpstreamUnavailableError(
                "the spend ledger is unavailable", code="ledger_unavailable"
            ) from exc
        if fmt == "csv":
            return Response(to_csv(rows), media_type="text/csv")
        return JSONResponse(
            {"object": "spend_report", "from": start.isoformat(), "to": end.isoformat(), "data": rows}
        )

    async def audit(self, request: Request) -> JSONResponse:
        store = self._need_store()
        raw = request.query_params.get("limit", "100")
        if not raw.isdigit() or not 1 <= int(raw) <= 1000:
            raise InvalidRequestError("limit must be an integer from 1 to 1000", param="limit")
        try:
            entries = await store.audit_entries(int(raw))
        except Exception as exc:  # noqa: BLE001 - the database is unavailable
            raise UpstreamUnavailableError("the audit log is unavailable", code="audit_unavailable") from exc
        for e in entries:
            if isinstance(e.get("at"), dt.datetime):
                e["at"] = e["at"].isoformat()
        return JSONResponse({"object": "list", "data": entries})


def _date(value: str | None, name: str) -> dt.datetime:
    if not value:
        raise InvalidRequestError(f"missing query parameter '{name}' (a date, e.g. 2026-11-01)", param=name)
    try:
        parsed = dt.datetime.fromisoformat(value[:40])
    except ValueError:
        raise InvalidRequestError(f"'{name}' is not an ISO date or time", param=name) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)
