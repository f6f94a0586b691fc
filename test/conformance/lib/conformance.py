"""Case runner for the conformance tier's scripts.

A script registers cases with @case and calls run(). argv[1] is a JSON object with the server's
endpoints ("http", "grpc": host:port; "metrics": URL) and any extra values the Node test passes.
Every case runs (a failing one does not stop the others) and the script prints one line,
"CONFORMANCE-RESULTS <json>", mapping each case name to {"status": "pass"} or
{"status": "fail", "error": <traceback>}; the Node test (test/conformance/**/*.test.ts) asserts
each case by name, so a case that does not run fails there.
"""
import asyncio
import inspect
import json
import sys
import traceback

_cases = []


def case(fn):
    _cases.append(fn)
    return fn


def run():
    ctx = json.loads(sys.argv[1])
    results = {}
    for fn in _cases:
        try:
            if inspect.iscoroutinefunction(fn):
                asyncio.run(fn(ctx))
            else:
                fn(ctx)
            results[fn.__name__] = {"status": "pass"}
        except BaseException:  # noqa: B902 - every failure, assertion or client error, is reported
            results[fn.__name__] = {"status": "fail", "error": traceback.format_exc()}
    print("CONFORMANCE-RESULTS " + json.dumps(results), flush=True)


def expect_error(fn, status=None, contains=()):
    """Calls fn, which must raise tritonclient's InferenceServerException; checks its status (the
    HTTP code as a string for HTTP, "StatusCode.X" for gRPC) and message fragments. Returns it."""
    from tritonclient.utils import InferenceServerException

    try:
        fn()
    except InferenceServerException as err:
        check_error(err, status, contains)
        return err
    raise AssertionError("expected an InferenceServerException")


async def expect_error_async(coro, status=None, contains=()):
    from tritonclient.utils import InferenceServerException

    try:
        await coro
    except InferenceServerException as err:
        check_error(err, status, contains)
        return err
    raise AssertionError("expected an InferenceServerException")


def check_error(err, status=None, contains=()):
    if status is not None:
        assert str(err.status()) == status, f"status {err.status()!r}, expected {status!r}: {err}"
    for fragment in contains:
        assert fragment in err.message(), f"{fragment!r} not in the message {err.message()!r}"
