"""PairingStore: single-use, expiring, bounded, attempt-limited codes, persisted atomically."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from lucidgate.channels import pairing
from lucidgate.channels.pairing import ALPHABET, PairingError, PairingStore, default_path, normalize_code


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> PairingStore:
    return PairingStore(default_path(tmp_path), clock=clock)


def test_codes_are_eight_unambiguous_characters_and_stable_per_sender(store: PairingStore) -> None:
    code = store.issue("telegram", "666")
    assert len(code) == 8 and set(code) <= set(ALPHABET)
    assert not set(code) & set("0O1IL")
    assert store.issue("telegram", "666") == code  # asking again does not mint a new one
    assert store.issue("telegram", "667") != code
    assert store.issue("slack", "666") != code
    assert store.path == default_path(store.path.parent.parent)


def test_approve_is_single_use_and_allows_the_sender(store: PairingStore) -> None:
    code = store.issue("telegram", "666")
    assert not store.is_approved("telegram", "666")
    assert store.approve(code) == ("telegram", "666")
    assert store.is_approved("telegram", "666")
    assert not store.is_approved("slack", "666")  # approval is per channel
    assert store.approve(code) is None  # single use
    assert store.pending() == []


def test_codes_are_matched_ignoring_case_spaces_and_dashes(store: PairingStore) -> None:
    code = store.issue("slack", "U123")
    typed = f" {code[:4].lower()}-{code[4:].lower()} "
    assert normalize_code(typed) == code
    assert store.approve(typed) == ("slack", "U123")


def test_codes_expire_after_an_hour(store: PairingStore, clock: Clock) -> None:
    code = store.issue("telegram", "666")
    clock.now += pairing.CODE_TTL_S - 1
    assert [p["code"] for p in store.pending("telegram")] == [code]
    clock.now += 2
    assert store.approve(code) is None
    assert not store.is_approved("telegram", "666")
    assert store.issue("telegram", "666") != code  # a fresh code after expiry


def test_at_most_five_outstanding_codes_per_channel(store: PairingStore, clock: Clock) -> None:
    for i in range(pairing.MAX_PENDING_PER_CHANNEL):
        store.issue("telegram", f"s{i}")
    with pytest.raises(PairingError):
        store.issue("telegram", "one-too-many")
    assert store.issue("slack", "other-channel")  # the limit is per channel
    clock.now += pairing.CODE_TTL_S + 1
    assert store.issue("telegram", "one-too-many")  # expired codes free their slots


def test_wrong_codes_lock_approval_and_revoke_outstanding_codes(store: PairingStore, clock: Clock) -> None:
    code = store.issue("telegram", "666")
    for _ in range(pairing.MAX_FAILED_APPROVALS - 1):
        assert store.approve("AAAAAAAA") is None
    assert [p["code"] for p in store.pending()] == [code]  # still below the limit
    assert store.approve("BBBBBBBB") is None  # the limit is reached: outstanding codes revoked
    assert store.pending() == []
    assert store.approve(code) is None
    fresh = store.issue("telegram", "777")
    assert store.approve(fresh) is None  # locked, even with a correct code
    clock.now += pairing.FAILURE_WINDOW_S + 1
    fresh = store.issue("telegram", "777")
    assert store.approve(fresh) == ("telegram", "777")  # the lock lifts with the window


def test_state_is_shared_through_the_file(tmp_path: Path, clock: Clock) -> None:
    path = default_path(tmp_path)
    gateway = PairingStore(path, clock=clock)
    cli = PairingStore(path, clock=clock)
    assert not gateway.is_approved("telegram", "666")  # caches the (missing) file
    code = gateway.issue("telegram", "666")
    assert cli.approve(code) == ("telegram", "666")
    assert gateway.is_approved("telegram", "666")  # sees the other instance's write
    data = json.loads(path.read_text())
    assert data["approved"] == {"telegram": ["666"]} and data["pending"] == []
    assert not list(path.parent.glob("*.tmp"))
    assert cli.revoke("telegram", "666") and not cli.revoke("telegram", "666")
    assert not gateway.is_approved("telegram", "666")
    assert gateway.approved("telegram") == []


def test_corrupt_file_is_treated_as_empty(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = default_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    store = PairingStore(path)
    assert not store.is_approved("telegram", "1")
    assert "unreadable" in caplog.text
    code = store.issue("telegram", "1")
    assert store.approve(code) == ("telegram", "1")
    assert json.loads(path.read_text())["approved"] == {"telegram": ["1"]}


def test_malformed_entries_are_dropped(tmp_path: Path, clock: Clock) -> None:
    path = default_path(tmp_path)
    path.parent.mkdir(parents=True)
    good = {"code": "ABCDEFGH", "channel": "telegram", "sender_id": "5", "expires_at": clock.now + 60}
    path.write_text(json.dumps({"pending": [good, {"code": 1}, "junk"], "approved": {"slack": "not-a-list"},
                                "failures": ["x", clock.now]}))
    store = PairingStore(path, clock=clock)
    assert [p["code"] for p in store.pending()] == ["ABCDEFGH"]
    assert store.approved("slack") == []
    assert store.approve("ABCDEFGH") == ("telegram", "5")


def test_concurrent_issue_and_approve_are_safe(tmp_path: Path) -> None:
    path = default_path(tmp_path)
    stores = [PairingStore(path) for _ in range(4)]  # like several processes on one file
    codes: dict[str, str] = {}
    errors: list[BaseException] = []

    def issue(i: int) -> None:
        try:
            codes[f"u{i}"] = stores[i % 4].issue(f"chan{i % 5}", f"u{i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=issue, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(set(codes.values())) == 20
    assert len(stores[0].pending()) == 20  # nothing lost to a racing read-modify-write

    results: list[tuple[str, str] | None] = []
    threads = [threading.Thread(target=lambda c=c: results.append(stores[1].approve(c))) for c in codes.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r[1] for r in results if r) == sorted(codes)
    assert all(stores[2].is_approved(f"chan{i % 5}", f"u{i}") for i in range(20))
