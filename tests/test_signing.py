"""The request-signature canon (conf.signing, one module for clients, brokers and the
controller): what one side signs the other verifies; skew, tampering and
replays are refused; the replay cache stays bounded without letting a replay through."""

from __future__ import annotations

import pytest

from conf import signing

NOW_MS = 1_790_000_000_000
CREDS = ("AK1", "s3cret-key-1")


def _headers(module, method="DO_ACTION", target=b"create_topic\n{}", now_ms=NOW_MS,
             nonce="0" * 32, creds=CREDS):
    pairs = module.sign_headers(module.Credentials(*creds), method, target, now_ms, nonce)
    return {key.decode(): [value.decode()] for key, value in pairs}


def _secret_of(access_key):
    return CREDS[1] if access_key == CREDS[0] else None


@pytest.mark.parametrize("method,target", [
    ("DO_ACTION", signing.action_target("create_topic", b'{"topic":"t"}')),
    ("DO_GET", b'{"topic":"t","queue_id":0}'),
    ("DO_PUT", signing.descriptor_target(b'{"topic":"t"}', None)),
    ("GET_FLIGHT_INFO", signing.descriptor_target(None, [b"t", b"\x00x"])),
    ("LIST_ACTIONS", b""),
])
def test_what_is_signed_verifies(method: str, target: bytes) -> None:
    verified = signing.verify(_headers(signing, method, target), method, _secret_of, NOW_MS,
                              1000, None)
    assert verified.digest == signing.target_digest(method, target)
    tampered = target + b"x"
    assert signing.target_digest(method, tampered) != verified.digest


@pytest.mark.parametrize("module", [signing])
def test_refusals(module) -> None:
    verify = module.verify
    good = _headers(module)
    with pytest.raises(module.SignatureError, match="does not match"):
        verify(_headers(module, creds=("AK1", "wrong-secret")), "DO_ACTION", _secret_of,
               NOW_MS, 1000, None)
    with pytest.raises(module.SignatureError, match="does not match"):
        verify(good, "DO_GET", _secret_of, NOW_MS, 1000, None)  # another method
    with pytest.raises(module.SignatureError, match="from this server's clock"):
        verify(good, "DO_ACTION", _secret_of, NOW_MS + 1001, 1000, None)
    with pytest.raises(module.SignatureError, match="from this server's clock"):
        verify(good, "DO_ACTION", _secret_of, NOW_MS - 1001, 1000, None)
    with pytest.raises(module.SignatureError, match="unknown"):
        verify(_headers(module, creds=("AK2", "s3cret-key-1")), "DO_ACTION", _secret_of,
               NOW_MS, 1000, None)
    with pytest.raises(module.SignatureError, match="missing"):
        verify({}, "DO_ACTION", _secret_of, NOW_MS, 1000, None)
    tampered = dict(good, **{module.HEADER_DIGEST: ["f" * 64]})
    with pytest.raises(module.SignatureError, match="does not match"):
        verify(tampered, "DO_ACTION", _secret_of, NOW_MS, 1000, None)
    doubled = dict(good, **{module.HEADER_NONCE: ["0" * 32, "1" * 32]})
    with pytest.raises(module.SignatureError, match="repeated"):
        verify(doubled, "DO_ACTION", _secret_of, NOW_MS, 1000, None)
    assert "s3cret" not in repr(module.Credentials(*CREDS))


@pytest.mark.parametrize("module", [signing])
def test_a_replay_is_refused(module) -> None:
    guard = module.ReplayGuard(100)
    headers = _headers(module)
    module.verify(headers, "DO_ACTION", _secret_of, NOW_MS, 1000, guard)
    with pytest.raises(module.SignatureError, match="replayed"):
        module.verify(headers, "DO_ACTION", _secret_of, NOW_MS + 5, 1000, guard)
    other = _headers(module, nonce="1" * 32)  # the same request signed again: fine
    module.verify(other, "DO_ACTION", _secret_of, NOW_MS + 5, 1000, guard)


@pytest.mark.parametrize("module", [signing])
def test_the_replay_cache_is_bounded_and_a_forgotten_call_stays_refused(module) -> None:
    guard = module.ReplayGuard(4)
    calls = [_headers(module, now_ms=NOW_MS + i, nonce=f"{i:032x}") for i in range(10)]
    for i, headers in enumerate(calls):
        module.verify(headers, "DO_ACTION", _secret_of, NOW_MS + i, 1000, guard)
        assert len(guard) <= 4
    assert guard.floor_ms >= NOW_MS + 5
    for headers in calls:  # every one refused: seen, or at/below the floor
        with pytest.raises(module.SignatureError) as caught:
            module.verify(headers, "DO_ACTION", _secret_of, NOW_MS + 10, 1000, guard)
        assert "replayed" in caught.value.reason or caught.value.busy
    # entries out of the window are dropped without raising the floor
    guard = module.ReplayGuard(4)
    module.verify(calls[0], "DO_ACTION", _secret_of, NOW_MS, 1000, guard)
    late = _headers(module, now_ms=NOW_MS + 5000, nonce="a" * 32)
    module.verify(late, "DO_ACTION", _secret_of, NOW_MS + 5000, 1000, guard)
    assert len(guard) == 1 and guard.floor_ms == -1
