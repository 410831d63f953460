"""Ditto's HTTP API 2 over the ledger (issue 51): an ASGI application. Every answer is in Ditto's
shape (status, JSON body, ``correlation-id``, ``etag``, ``location``); every refusal is Ditto's
error JSON and leaves the ledger unchanged. The routes are listed in docs/http.md. Ditto's
WebSocket, ``/ws/2``, is ``socket``'s.

A writing request (``PUT``, ``PATCH``, ``DELETE``, a message's ``POST``) is stored with the
requests beside it (``intake``), then held until the ledger decided it (``held``) for at most its
timeout and one minute (``http_api.hold_ms``); a hold that ends first is answered 202 with the
``Location`` of its answer, ``GET /api/2/answers/<correlation-id>`` (decisions #134).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, AsyncIterator, Awaitable, Callable

from sqlalchemy.exc import DBAPIError, OperationalError
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.datastructures import QueryParams
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from ackstore.doors import consumers, events
from ackstore.doors.door import Door
from ackstore.doors.logins import Login
from ackstore.doors.socket import serve as serve_socket
from ackstore.ledger import failures, results, things
from ackstore.ledger.database_url import DatabaseUrl
from ackstore.ledger.store import AckStore
from ackstore.rules import errors, fields, headers, http_api, twin, ws_protocol
from ackstore.rules.settings import Settings

log = logging.getLogger("ackstore.doors")

WRITES = ("PUT", "PATCH", "DELETE", "POST")


def application(url: DatabaseUrl, settings: Settings | None = None, *, trusting: bool = False,
                token_key: bytes | None = None) -> Starlette:
    door = Door(url, settings or Settings.from_env(), trusting=trusting, token_key=token_key)

    async def things_route(request: Request) -> Response:
        where = http_api.resource(request.path_params["thing_id"], request.path_params.get("rest", ""))
        if request.method == "GET":
            return await _read(door, request, where)
        if request.method == "POST" and not where.is_message:  # a thing is created by POST /things only
            raise errors.method_not_allowed(request.method)
        return await _write(door, request, where)

    async def create_route(request: Request) -> Response:
        login = await door.login_of(request)
        thing_id = http_api.generated_thing_id(request.query_params.get("namespace"), login.name,
                                               request.headers.get(headers.CORRELATION_ID))
        return await _write(door, request, http_api.resource(thing_id, ""), login)

    async def things_list_route(request: Request) -> Response:
        if events.wants_events(request):
            return await events.stream(door, request)
        ids = [http_api.checked_thing_id(thing_id.strip())  # 400 things:id.invalid for one that is none
               for thing_id in request.query_params.get("ids", "").split(",") if thing_id.strip()]
        if not ids:
            raise errors.thing_ids_missing()  # Ditto's GET /things takes the ids it is to retrieve
        selector = _selector(request)
        store = await door.store_of(request)
        found = await asyncio.to_thread(things.read_documents, store.engine, ids)
        return _response(http_api.HttpAnswer(200, {}, [_shown(found[i], selector) for i in ids if i in found]))

    async def answers_route(request: Request) -> Response:
        login = await door.login_of(request)
        correlation_id = request.path_params["correlation_id"]
        row = await asyncio.to_thread(_latest, login.store, correlation_id)
        if row is None or not http_api.stored_by(login.name, row.source, row.source_message_id):
            unknown = AckStore.unknown(correlation_id)  # another login's request is unknown to this one
            return _response(http_api.refused(unknown))
        if row.status is None:
            return _response(http_api.accepted(correlation_id, still_deciding=True))
        return _response(http_api.decided(results.answer(row)))

    async def search_route(request: Request) -> Response:
        given = await _search_parameters(door, request)
        size, after = http_api.search_page(given.get("option"))
        selector = http_api.field_selector(given.getlist("fields"))
        store = await door.store_of(request)
        found = await asyncio.to_thread(_search, store, given.get("filter", http_api.EVERY_THING),
                                        _namespaces(given), size, after, selector)
        return _response(found)

    async def count_route(request: Request) -> Response:
        given = await _search_parameters(door, request)
        store = await door.store_of(request)
        counted = await asyncio.to_thread(store.count, given.get("filter", http_api.EVERY_THING), _namespaces(given))
        if counted["status"] != 200:
            return _response(http_api.refused(counted))
        return _response(http_api.HttpAnswer(200, {}, counted["count"]))

    async def whoami_route(request: Request) -> Response:
        subject = f"postgres:{(await door.login_of(request)).name}"
        return _response(http_api.HttpAnswer(200, {}, {"defaultSubject": subject, "subjects": [subject]}))

    async def pull_route(request: Request) -> Response:
        return _response(await consumers.pull(door, request))

    async def acknowledge_route(request: Request) -> Response:
        return _response(await consumers.acknowledge(door, request))

    async def socket_route(websocket: WebSocket) -> None:
        await serve_socket(door, websocket)

    async def metrics_route(_: Request) -> Response:
        return Response(door.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    def guarded(route: str, answer: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        refusing = _guarded(answer)  # wrapped once, not on every request

        async def counted(request: Request) -> Response:
            response = await refusing(request)
            door.metrics.answered(route, response.status_code)
            return response

        return counted

    subscriber = f"{http_api.API}/subscribers/{{subscriber}}/messages"
    routes = [
        Route(subscriber, guarded("pull", pull_route), methods=["POST"]),
        Route(f"{subscriber}/{{correlation_id:path}}/acknowledgement;etag={{token}}",
              guarded("acknowledgement", acknowledge_route), methods=["POST"]),
        Route(f"{http_api.API}/things", guarded("things", things_list_route), methods=["GET"]),
        Route(f"{http_api.API}/things", guarded("things", create_route), methods=["POST"]),
        Route(f"{http_api.API}/things/{{thing_id}}", guarded("things", things_route), methods=["GET", *WRITES]),
        Route(f"{http_api.API}/things/{{thing_id}}/{{rest:path}}", guarded("things", things_route),
              methods=["GET", *WRITES]),
        Route(f"{http_api.API}/answers/{{correlation_id:path}}", guarded("answers", answers_route), methods=["GET"]),
        Route(f"{http_api.API}/search/things", guarded("search", search_route), methods=["GET", "POST"]),
        Route(f"{http_api.API}/search/things/count", guarded("search", count_route), methods=["GET", "POST"]),
        Route(f"{http_api.API}/whoami", guarded("whoami", whoami_route), methods=["GET"]),
        Route("/metrics", metrics_route, methods=["GET"]),
        WebSocketRoute(ws_protocol.PATH, socket_route),
    ]
    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        door.start()
        try:
            yield
        finally:
            await asyncio.to_thread(door.stop)  # joins the decisions' thread: not on the loop

    async def not_found(request: Request, _: Exception) -> Response:
        door.metrics.answered("other", 404)
        return _response(http_api.error(errors.resource_not_found(request.url.path)))

    async def method_not_allowed(request: Request, _: Exception) -> Response:
        door.metrics.answered("other", 405)
        return _response(http_api.error(errors.method_not_allowed(request.method)))

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: method_not_allowed},
                    middleware=[Middleware(BoundedHead)])
    app.state.door = door
    return app


class BoundedHead:
    """Ditto's 414 / 431 for a request whose URI or headers are past the door's bounds, before any
    route reads them (``http_api.check_head``)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            uri = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
            header_bytes = sum(len(name) + len(value) for name, value in scope.get("headers", ()))
            try:
                http_api.check_head(uri, header_bytes)
            except errors.DittoError as problem:
                await _response(http_api.error(problem))(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _write(door: Door, request: Request, where: http_api.Resource, login: Login | None = None) -> Response:
    login = login or await door.login_of(request)
    with door.holding(login.name):
        return await _write_held(door, request, where, login)


async def _write_held(door: Door, request: Request, where: http_api.Resource, login: Login) -> Response:
    store = login.store
    body = await door.body(request)
    given = http_api.ditto_headers(request.headers, request.query_params)
    envelope = http_api.signal(request.method, where, given, body, request.headers.get("content-type"),
                               door.settings.max_envelope_bytes)
    asked = headers.normalize(envelope["headers"], channel="live" if where.is_message else "twin", api="http",
                              settings=store.settings)
    envelope["headers"] = asked.headers  # its correlation id fixed here, the one the client retries with
    # keyed by the login even when the door made the correlation id up: its answer is the login's alone
    stored = await login.intake.submit(envelope, http_api.message_id(login.name, asked.correlation_id))
    if not stored.ok:
        return _response(http_api.refused(stored.answer))
    hold_ms = http_api.hold_ms(asked)
    if hold_ms == 0:
        return _response(http_api.accepted(asked.correlation_id, still_deciding=False))
    if stored.retransmitted:  # a retry (of this login's own: the login is in the key): its decision may be there
        row = await asyncio.to_thread(_latest, store, asked.correlation_id)
        if row is not None and row.status is not None:
            return _response(http_api.decided(results.answer(row), where))
    decision = await door.decisions.wait(asked.correlation_id, hold_ms / 1000)
    if decision is None:
        door.metrics.hold_ended()
        return _response(http_api.accepted(asked.correlation_id, still_deciding=True))
    return _response(http_api.decided(decision, where))


async def _read(door: Door, request: Request, where: http_api.Resource) -> Response:
    if where.is_message:
        raise errors.method_not_allowed(request.method)
    selector = _selector(request)
    condition = http_api.ditto_headers(request.headers, request.query_params).get("condition")
    store = await door.store_of(request)
    read = await asyncio.to_thread(_thing_read, store, where.thing_id)
    value, etag = twin.retrieve(read.state, where.path, condition)
    twin.check_if_match(etag, request.headers.get("if-match"))
    if twin.not_modified(etag, request.headers.get("if-none-match")):
        return Response(status_code=304, headers={"etag": etag} if etag else {})
    shown = _shown(read, selector) if where.path == "/" else http_api.part_shown(value, selector)
    return _response(http_api.retrieved(shown, etag))


async def _search_parameters(door: Door, request: Request) -> QueryParams:
    """A search's parameters: its query's, and for a ``POST`` its form's, which win."""
    if request.method != "POST":
        return request.query_params
    form = http_api.form_text(await door.body(request), request.headers.get("content-type"))
    return QueryParams(f"{request.url.query}&{form}")


def _namespaces(given: QueryParams) -> list[str] | None:
    namespaces = given.get("namespaces")
    return namespaces.split(",") if namespaces else None


def _selector(request: Request) -> tuple[fields.Pointer, ...] | None:
    return http_api.field_selector(request.query_params.getlist("fields"))


def _shown(read: things.Read, selector: tuple[fields.Pointer, ...] | None) -> Any:
    state = read.state
    return http_api.thing_shown(state.document, selector, state.thing_id, state.revision, read.modified)


def _thing_read(store: AckStore, thing_id: str) -> things.Read:
    with store.engine.connect() as conn:
        return things.read(conn, thing_id)


def _search(store: AckStore, expression: str, namespaces: list[str] | None, size: int,
            after: str | None, selector: tuple[fields.Pointer, ...] | None) -> http_api.HttpAnswer:
    """A page of the search: ``size`` things after ``after``, read one more to know whether a next page is."""
    found = store.search(expression, namespaces, after=after, limit=size + 1)
    if found["status"] != 200:
        return http_api.refused(found)
    ids = found["items"][:size]
    documents = things.read_documents(store.engine, ids)
    more = ids[-1] if len(found["items"]) > size else None
    shown = [_shown(documents[i], selector) for i in ids if i in documents]
    return http_api.HttpAnswer(200, {}, http_api.search_answer(shown, more))


def _latest(store: AckStore, correlation_id: str) -> Any:
    if AckStore.unknown(correlation_id)["status"] == 400:  # no signal could have it: not looked up
        return None
    with store.engine.connect() as conn:
        return results.latest_of(conn, [correlation_id]).get(correlation_id)


def _guarded(route: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Ditto's error JSON for whatever a route refuses; 503 while the ledger's database is away,
    500 for what went wrong here (logged, never shown)."""

    async def guarded(request: Request) -> Response:
        try:
            return await route(request)
        except errors.DittoError as problem:
            return _response(http_api.error(problem, request.headers.get(headers.CORRELATION_ID)))
        except OperationalError:
            log.warning("the ledger's database is not reachable", exc_info=True)
            return _response(http_api.error(errors.database_unavailable("behind this door", "it could not be reached")))
        except DBAPIError as problem:
            reason = failures.refused_privilege(problem)  # a login of no ingest role, say: 403
            if reason is None:
                log.exception("a request failed")
                return _response(http_api.error(errors.internal_error()))
            return _response(http_api.error(errors.permission_denied(None, reason)))
        except Exception:  # noqa: BLE001 — one request's, never the server's
            log.exception("a request failed")
            return _response(http_api.error(errors.internal_error()))

    return guarded


def _response(answer: http_api.HttpAnswer) -> Response:
    content = answer.content()
    media = http_api.JSON if content else None
    return Response(content, status_code=answer.status, headers=answer.headers, media_type=media)

