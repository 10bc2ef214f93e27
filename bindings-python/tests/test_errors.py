"""Every stable error code has an exception class of its own."""

from __future__ import annotations

import asyncio

import mqstore
import pytest
from mqstore import _native, errors


def test_every_code_the_core_reports_maps_to_its_own_class() -> None:
    examples = _native.error_examples()
    # 14 texts of the protocol, one unknown text, 16 errors of the client
    assert len(examples) == len(_native.error_kinds()) == 31
    classes = set()
    for code, message in examples:
        error = errors._error_for(code, message, None)
        assert type(error) is not mqstore.MqstoreError, f"code {code} has no class"
        assert error.code == code
        assert str(error) == message
        classes.add(type(error))
    assert len(classes) == len(examples)


def test_every_kind_of_error_in_core_has_its_class_with_its_name_and_code() -> None:
    kinds = _native.error_kinds()
    for code, name in kinds:
        cls = getattr(errors, name + "Error", None)
        assert cls is not None, f"no class {name}Error for code {code}"
        assert cls.code == code
        assert type(errors._error_for(code, "m", None)) is cls
    # ...and nothing but those (ClientForkedError is the binding's own, code 0).
    coded = {cls.code for cls in errors._CLASSES if cls is not errors.ClientForkedError}
    assert coded == {code for code, _ in kinds}


def test_service_errors_keep_the_state_stores_text() -> None:
    error = errors._error_for(104, "the state store refused the request: ...", "the text")
    assert isinstance(error, errors.FencingTokenLowerVersionError)
    assert isinstance(error, mqstore.ServiceError)
    assert error.text == "the text"


def test_timeouts_and_lost_connections_are_also_the_builtin_kinds() -> None:
    assert issubclass(errors.RequestTimeoutError, TimeoutError)
    assert issubclass(errors.CommandTimeoutError, TimeoutError)
    assert issubclass(errors.ConnectionLostError, ConnectionError)
    assert issubclass(errors.BrokerDisconnectedError, errors.ConnectionLostError)
    assert issubclass(errors.BrokerUnreachableError, ConnectionError)
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), mqstore.MqstoreError)
        assert issubclass(getattr(errors, name), Exception)


def test_an_unknown_code_is_still_an_mqstore_error() -> None:
    error = errors._error_for(299, "from a newer core", None)
    assert type(error) is mqstore.MqstoreError
    assert error.code == 299


@pytest.mark.parametrize("code", [212, 213, 214, 215])
def test_jobs_and_command_errors_carry_their_detail(code: int) -> None:
    error = errors._error_for(code, "message", "detail")
    if isinstance(error, errors.JobsError):
        assert error.jobs_code == "detail"
    else:
        assert isinstance(error, errors._CommandError)
        assert error.command_id == "detail"


def test_a_panic_in_a_call_is_a_runtime_error_not_a_crash() -> None:
    with pytest.raises(RuntimeError, match=r"internal error in mqstore.*deliberate panic"):
        _native._panicking_call(False)

    async def awaited() -> None:
        with pytest.raises(RuntimeError, match=r"internal error in mqstore.*deliberate panic"):
            await asyncio.wait_for(_native._panicking_call(True), 10)

    asyncio.run(awaited())
