"""Python client of the Tailor personalization service.

    from tailor_client import TailorClient

    with TailorClient("http://127.0.0.1:8000", api_key="tlr_...") as client:
        client.attributes.create("alice", "The user is vegetarian.", category="diet")
        turn = client.turn("alice", [{"role": "user", "content": "Dinner ideas?"}])
        print(turn.reply)

`AsyncTailorClient` has the same surface for asyncio. Results are the pydantic models of
`tailor_client.models` (named as in the service's openapi.yaml); failures raise `TailorError`
subclasses carrying the service's problem document."""

from tailor_client._async import (
    AsyncAttributes,
    AsyncEval,
    AsyncJobs,
    AsyncTailorClient,
    AsyncUsers,
)
from tailor_client._core import NOT_GIVEN, RETRY_STATUSES, RetryPolicy, __version__
from tailor_client._sync import Attributes, Eval, Jobs, TailorClient, Users
from tailor_client.errors import (
    AuthenticationFailed,
    BadGateway,
    BadRequest,
    ClientError,
    Conflict,
    ConnectionFailed,
    GatewayTimeout,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RateLimited,
    ServerError,
    StreamInterrupted,
    TailorError,
    Unavailable,
    UnsupportedMediaType,
    ValidationFailed,
    WaitTimeout,
)
from tailor_client.sse import AttributesEvent, DeltaEvent, DoneEvent, ServerSentEvent, StreamEvent
from tailor_client.streams import AsyncReplyStream, ReplyStream

__all__ = [
    "NOT_GIVEN",
    "RETRY_STATUSES",
    "AsyncAttributes",
    "AsyncEval",
    "AsyncJobs",
    "AsyncReplyStream",
    "AsyncTailorClient",
    "AsyncUsers",
    "Attributes",
    "AttributesEvent",
    "AuthenticationFailed",
    "BadGateway",
    "BadRequest",
    "ClientError",
    "Conflict",
    "ConnectionFailed",
    "DeltaEvent",
    "DoneEvent",
    "Eval",
    "GatewayTimeout",
    "Jobs",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "RateLimited",
    "ReplyStream",
    "RetryPolicy",
    "ServerError",
    "ServerSentEvent",
    "StreamEvent",
    "StreamInterrupted",
    "TailorClient",
    "TailorError",
    "Unavailable",
    "UnsupportedMediaType",
    "Users",
    "ValidationFailed",
    "WaitTimeout",
    "__version__",
]
