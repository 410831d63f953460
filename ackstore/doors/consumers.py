"""The REST pull over HTTP (issue 51; the specification's A.3): a consumer resource per subscriber.
``POST …/subscribers/<subscriber>/messages`` hands out the next message under a lease — 200 with
the Ditto Protocol message and ``Link: <…/acknowledgement;etag=<token>>; rel=acknowledgement``,
204 when there is none; a ``POST`` of the message's acknowledgement (or live response) to that
link answers 204, 412 when the message was handed out again since, and 204 again for a repeat
(decisions #135: the ledger keeps it idempotent). The subscriber is the login's (403 otherwise).
"""

from __future__ import annotations

import asyncio
import functools

from starlette.requests import Request

from ackstore.doors.door import Door
from ackstore.rules import connectivity, errors, http_api

async def pull(door: Door, request: Request) -> http_api.HttpAnswer:
    store = await door.store_of(request)
    subscriber = request.path_params["subscriber"]
    lease = {"lease": request.query_params["lease"]} if "lease" in request.query_params else {}  # else pull's
    handed = await asyncio.to_thread(functools.partial(store.pull, subscriber, max=1, **lease))
    if not handed:
        return http_api.HttpAnswer(204, {})
    return http_api.handed_out(handed[0], subscriber)


async def acknowledge(door: Door, request: Request) -> http_api.HttpAnswer:
    store = await door.store_of(request)
    subscriber, correlation_id = request.path_params["subscriber"], request.path_params["correlation_id"]
    answer = http_api.answer_at_link(await door.body(request), correlation_id, request.path_params["token"],
                                     door.settings.max_envelope_bytes)
    take = store.acknowledge if connectivity.is_acknowledgement(answer) else store.respond
    done = await asyncio.to_thread(take, subscriber, answer)
    if done["status"] != 204:
        raise errors.DittoError(done["status"], done["error"], done["message"], done.get("description"))
    return http_api.HttpAnswer(204, {})
