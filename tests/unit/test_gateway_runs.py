"""The gateway's recent-runs store: filing, cursors, and both bounds (pure: no broker)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from symfonic_stream.gateway.runs import HELD_OVERHEAD, Run, RunStore
from symfonic_stream.gateway.sse import Envelope


def _file(store: RunStore, run_id: str, seq: int, *, offset: int = 0, size: int = 10,
          closes: bool = False, partition: int = 0, tenant: str | None = None,
          from_event: bool = True) -> str:
    envelope = Envelope(run_id, seq, "end" if closes else "text_delta", closes, from_event)
    return store.append(partition, offset, envelope, b"x" * size, tenant)


def _any(run: Run) -> bool:
    return True


def test_a_run_is_indexed_at_its_first_record() -> None:
    store = RunStore(cache_bytes=10**6, max_runs=10)
    _file(store, "a", 0, offset=41, partition=2)
    _file(store, "a", 1, offset=45, partition=2)
    run = store.get("a")
    assert run is not None
    assert (run.partition, run.first_offset, run.first_seq, run.next_seq) == (2, 41, 0, 2)
    assert [h.seq for h in run.held_after(-1)] == [0, 1]
    assert [h.seq for h in run.held_after(0)] == [1]
    assert run.held_after(1) == []


def test_a_run_first_seen_mid_way_starts_at_that_seq() -> None:
    store = RunStore(cache_bytes=10**6, max_runs=10)
    _file(store, "a", 5, offset=7)
    run = store.get("a")
    assert run is not None and (run.first_seq, run.held_from, run.next_seq) == (5, 5, 6)


def test_repeats_are_counted_not_held_and_jumps_are_held() -> None:
    store = RunStore(cache_bytes=10**6, max_runs=10)
    for seq in (0, 1, 1, 0, 4, 5):
        _file(store, "a", seq)
    run = store.get("a")
    assert run is not None
    assert [h.seq for h in run.held] == [0, 1, 4, 5]
    assert (store.repeated, store.jumped) == (2, 1)
    # After a jump the cursor still finds the right place.
    assert [h.seq for h in run.held_after(1)] == [4, 5]
    assert [h.seq for h in run.held_after(2)] == [4, 5]
    assert [h.seq for h in run.held_after(4)] == [5]


def test_a_closing_record_closes_the_run() -> None:
    store = RunStore(cache_bytes=10**6, max_runs=10)
    _file(store, "a", 0)
    _file(store, "a", 1, closes=True)
    run = store.get("a")
    assert run is not None and run.closed


def test_the_byte_budget_drops_the_least_recently_active_runs_records_first() -> None:
    record = 100 + HELD_OVERHEAD
    store = RunStore(cache_bytes=5 * record, max_runs=10)
    for seq in range(2):
        _file(store, "old", seq, size=100)
    for seq in range(3):
        _file(store, "new", seq, size=100)
    assert store.held_bytes == 5 * record
    _file(store, "new", 3, size=100)  # over: "old" loses what it held, stays indexed
    old, new = store.get("old"), store.get("new")
    assert old is not None and new is not None
    assert old.held == [] and old.held_from == old.next_seq == 2 and old.first_offset == 0
    assert [h.seq for h in new.held] == [0, 1, 2, 3]
    assert store.held_bytes == 4 * record


def test_one_run_over_the_budget_keeps_its_newest_records() -> None:
    record = 100 + HELD_OVERHEAD
    store = RunStore(cache_bytes=4 * record, max_runs=10)
    for seq in range(9):
        _file(store, "big", seq, size=100)
    run = store.get("big")
    assert run is not None
    assert store.held_bytes <= 4 * record
    assert run.held[-1].seq == 8 and run.held_from > 0
    assert [h.seq for h in run.held] == list(range(run.held_from, 9))


def test_the_run_bound_forgets_the_oldest_run_without_a_viewer() -> None:
    store = RunStore(cache_bytes=10**6, max_runs=2)
    _file(store, "a", 0)
    _file(store, "b", 0)
    viewed = store.get("a")
    assert viewed is not None
    viewed.viewers = 1
    _file(store, "c", 0)
    assert store.get("a") is viewed and store.get("b") is None and store.get("c") is not None
    assert len(store) == 2


async def test_waiting_for_a_run_returns_it_when_it_arrives() -> None:
    store = RunStore(cache_bytes=10**6, max_runs=10)
    waiting = asyncio.create_task(store.wait_for("late", _any, 5.0))
    await asyncio.sleep(0.01)
    _file(store, "late", 0)
    run = await asyncio.wait_for(waiting, 1.0)
    assert run is not None and run.run_id == "late"


async def test_waiting_for_a_run_that_never_comes_times_out() -> None:
    store = RunStore(cache_bytes=10**6, max_runs=10)
    assert await store.wait_for("never", _any, 0.05) is None
    assert await store.wait_for("never", _any, 0) is None


async def test_viewers_are_woken_by_each_record() -> None:
    store = RunStore(cache_bytes=10**6, max_runs=10)
    _file(store, "a", 0)
    run = store.get("a")
    assert run is not None
    changed = run.changed
    woken = asyncio.create_task(changed.wait())
    await asyncio.sleep(0)
    assert not woken.done()
    _file(store, "a", 1)
    await asyncio.wait_for(woken, 1.0)
    assert run.changed is not changed and not run.changed.is_set()


async def test_a_request_that_gives_up_does_not_cut_the_others_wait() -> None:
    store = RunStore(cache_bytes=10**6, max_runs=10)
    patient = asyncio.create_task(store.wait_for("late", _any, 5.0))
    impatient = asyncio.create_task(store.wait_for("late", _any, 0.05))
    assert await impatient is None
    _file(store, "late", 0)
    run = await asyncio.wait_for(patient, 1.0)
    assert run is not None and run.run_id == "late"


def test_trimming_many_runs_is_not_quadratic() -> None:
    """200,000 runs through a budget of a few: each append trims the oldest holder only
    (a scan of every run per append would make this quadratic)."""
    record = 10 + HELD_OVERHEAD
    store = RunStore(cache_bytes=3 * record, max_runs=300_000)
    for i in range(200_000):
        _file(store, f"r{i}", 0)
    assert store.held_bytes <= 3 * record and len(store) == 200_000
    held = [r for r in (store.get(f"r{i}") for i in range(199_990, 200_000)) if r and r.held]
    assert [r.run_id for r in held] == ["r199997", "r199998", "r199999"]


def test_what_is_ready_goes_out_in_few_writes() -> None:
    from symfonic_stream.gateway.runs import Held
    from symfonic_stream.gateway.viewer import BATCH_BYTES, BATCH_RECORDS, _pieces

    small = [Held(s, "text_delta", b"x", False) for s in range(BATCH_RECORDS * 2 + 5)]
    assert [len(p) for p in _pieces(small)] == [BATCH_RECORDS, BATCH_RECORDS, 5]
    big = [Held(s, "text_delta", b"x" * (BATCH_BYTES // 2), False) for s in range(5)]
    assert [len(p) for p in _pieces(big)] == [2, 2, 1]
    ending = [Held(0, "text_delta", b"x", False), Held(1, "end", b"e", True),
              Held(2, "text_delta", b"late", False)]
    assert [[h.seq for h in p] for p in _pieces(ending)] == [[0, 1]]  # nothing after the end
    assert _pieces([]) == []


def test_a_run_is_pinned_to_the_tenant_of_its_first_record_from_an_event() -> None:
    """Issue 33 item 3: a later record of the same run id with another tenant (or, though
    projected from an event, with none) is neither held nor served; a projector's own
    records (a gap, an abandoned end: no event, no tenant) stay the run's."""
    store = RunStore(cache_bytes=10**6, max_runs=10)
    assert _file(store, "r", 0, tenant=None, from_event=False) == "filed"  # a gap: no pin yet
    run = store.get("r")
    assert run is not None and not run.pinned
    assert _file(store, "r", 1, tenant="acme") == "filed"
    assert (run.pinned, run.tenant) == (True, "acme")
    assert _file(store, "r", 2, tenant="globex") == "foreign"
    assert _file(store, "r", 3, tenant=None) == "foreign"  # an event naming no tenant
    assert _file(store, "r", 4, tenant="acme") == "filed"
    assert _file(store, "r", 5, tenant=None, from_event=False, closes=True) == "filed"
    assert [h.seq for h in run.held] == [0, 1, 4, 5]
    assert (run.foreign, store.foreign) == (2, 2)
    assert run.closed


def test_a_foreign_closing_record_does_not_close_the_run() -> None:
    store = RunStore(cache_bytes=10**6, max_runs=10)
    _file(store, "r", 0, tenant="acme")
    assert _file(store, "r", 1, tenant="globex", closes=True) == "foreign"
    run = store.get("r")
    assert run is not None and not run.closed and run.next_seq == 1


def test_a_run_whose_first_event_names_no_tenant_is_pinned_to_none() -> None:
    store = RunStore(cache_bytes=10**6, max_runs=10)
    _file(store, "r", 0, tenant=None)
    assert _file(store, "r", 1, tenant="acme") == "foreign"
    run = store.get("r")
    assert run is not None and (run.pinned, run.tenant, [h.seq for h in run.held]) == (
        True, None, [0])


def _of(tenant: str) -> Callable[[Run], bool]:
    return lambda run: run.pinned and run.tenant == tenant


async def test_a_run_of_another_tenant_is_waited_for_like_an_unknown_one() -> None:
    """Issue 33 item 4: both requests wait on the same event, the run id's arrival, for
    the whole wait, and both get nothing; only a pin to the right tenant ends a wait."""
    store = RunStore(cache_bytes=10**6, max_runs=10)
    _file(store, "acme-run", 0, tenant="acme")
    foreign = asyncio.create_task(store.wait_for("acme-run", _of("globex"), 0.3))
    unknown = asyncio.create_task(store.wait_for("nobody", _of("globex"), 0.3))
    await asyncio.sleep(0)  # (each runs to its wait)
    assert (store.waiters("acme-run"), store.waiters("nobody")) == (1, 1)
    _file(store, "nobody", 0, tenant="acme")  # arrives, but is not globex's: waits on
    assert await foreign is None and await unknown is None
    assert (store.waiters("acme-run"), store.waiters("nobody")) == (0, 0)


async def test_a_wait_ends_when_the_run_is_pinned_to_the_requests_tenant() -> None:
    store = RunStore(cache_bytes=10**6, max_runs=10)
    _file(store, "r", 0, tenant=None, from_event=False)  # a gap first: not pinned yet
    waiting = asyncio.create_task(store.wait_for("r", _of("acme"), 5.0))
    await asyncio.sleep(0)
    assert store.waiters("r") == 1
    _file(store, "r", 1, tenant="acme")
    run = await asyncio.wait_for(waiting, 1.0)
    assert run is not None and run.tenant == "acme"


def _lifetime(store: RunStore, run_id: str, tenant: str, offsets: range) -> None:
    """One lifetime of ``run_id`` as the projectors write it (contract §5): every record,
    its closing end included, carrying the owner's tenant."""
    for seq, offset in enumerate(offsets):
        _file(store, run_id, seq, offset=offset, tenant=tenant, closes=seq == len(offsets) - 1)


def test_the_pin_is_the_same_on_every_replica_whatever_each_held_first() -> None:
    """Issue 43: a run was pinned to the first record this replica happened to hold. acme's
    run ends, the projectors forget it past its grace, and globex begins a new lifetime of
    the id: a replica that held acme's records kept the pin (globex's run was foreign to
    it), one that forgot the run at max_runs (a flood of runs) pinned globex, one started
    later pinned globex. Every record names its run's owner, and seq 0 under another
    tenant begins again: all three pin globex and serve its lifetime alone."""
    held_all = RunStore(cache_bytes=10**6, max_runs=10)
    flooded = RunStore(cache_bytes=10**6, max_runs=1)
    started_later = RunStore(cache_bytes=10**6, max_runs=10)
    for store in (held_all, flooded):
        _lifetime(store, "r", "acme", range(0, 3))
    for i in range(5):  # globex's flood: "r" is forgotten by the store of one run
        _file(flooded, f"flood-{i}", 0, offset=10 + i, tenant="globex")
    assert flooded.get("r") is None
    for store in (held_all, flooded):
        _lifetime(store, "r", "globex", range(20, 23))
    _file(started_later, "r", 1, offset=21, tenant="globex")  # its window begins mid-run
    _file(started_later, "r", 2, offset=22, tenant="globex", closes=True)
    for store in (held_all, flooded, started_later):
        run = store.get("r")
        assert run is not None and (run.pinned, run.tenant) == (True, "globex")
        assert run.foreign == 0 and run.closed
    run = held_all.get("r")
    assert run is not None and run.first_offset == 20
    assert [h.seq for h in run.held] == [0, 1, 2]


def test_seq_0_of_a_closed_run_begins_its_next_lifetime_and_ends_the_old_ones_viewers(
) -> None:
    store = RunStore(cache_bytes=10**6, max_runs=10)
    _lifetime(store, "r", "acme", range(0, 2))
    old = store.get("r")
    assert old is not None and old.closed
    changed = old.changed
    assert _file(store, "r", 0, offset=9, tenant="acme") == "filed"
    new = store.get("r")
    assert new is not None and new is not old
    assert (new.first_offset, [h.seq for h in new.held], new.closed) == (9, [0], False)
    assert changed.is_set() and old.held == []  # (its viewers wake, and find it over)
    assert store.held_bytes == 10 + HELD_OVERHEAD


def test_another_tenants_record_inside_a_lifetime_never_moves_the_pin() -> None:
    """Only seq 0 begins again; another tenant's record anywhere else is foreign, a
    closing one included."""
    store = RunStore(cache_bytes=10**6, max_runs=10)
    for seq in range(3):
        _file(store, "r", seq, tenant="acme")
    for seq, closes in ((3, False), (4, True), (1, False)):
        assert _file(store, "r", seq, tenant="globex", closes=closes) == "foreign"
    run = store.get("r")
    assert run is not None and (run.tenant, run.closed, run.next_seq) == ("acme", False, 3)
