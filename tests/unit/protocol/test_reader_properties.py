"""Property tests of CdcReader: any duplication, reordering and re-batching of a valid history's
messages gives back exactly that history, and no time is reported before it is complete."""

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_emitter import CdcReader, Progress, Update, consolidate, progress_for
from cdc_emitter.protocol import CountingReader, TimeCounts

EXAMPLES = settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

rows = st.one_of(st.integers(0, 6), st.tuples(st.integers(0, 3), st.sampled_from(["x", "y", None])))


@st.composite
def mangled_history(draw):
    horizon = draw(st.integers(1, 12))
    raw = draw(
        st.lists(
            st.tuples(rows, st.integers(0, horizon - 1), st.integers(-3, 3).filter(bool)),
            max_size=40,
        )
    )
    history = consolidate(raw)
    closed = draw(st.booleans())

    def chain():
        inner = (
            sorted(draw(st.sets(st.integers(1, horizon - 1), max_size=horizon)))
            if horizon > 1
            else []
        )
        bounds = [0, *inner, horizon]
        statements = [
            progress_for([u for u in history if lo <= u.time < hi], lo, hi)
            for lo, hi in zip(bounds, bounds[1:])
        ]
        if closed:  # the last interval never ends
            last = statements.pop()
            lo = last.lower[0]
            statements.append(progress_for([u for u in history if u.time >= lo], lo, None))
        return statements

    progress = chain()
    if draw(st.booleans()):  # a second, differently batched chain that agrees with the first
        progress += chain()

    order = draw(st.permutations(history)) if history else []
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(order))), max_size=8)))
    batches = [list(order[a:b]) for a, b in zip([0, *cuts], [*cuts, len(order)]) if order[a:b]]

    messages = batches + progress
    duplicates = draw(st.lists(st.sampled_from(messages), max_size=10)) if messages else []
    mangled = draw(st.permutations(messages + duplicates))
    return history, mangled, (() if closed else (horizon,))


@EXAMPLES
@given(mangled_history())
def test_reader_recovers_exactly_the_history(case):
    history, messages, final_frontier = case
    reader = CdcReader()
    reported = []
    for message in messages:
        for updates, frontier in reader.push(message):
            for update in updates:
                # never a time beyond what the frontier claims complete
                assert frontier == () or update.time < frontier[0]
            reported.extend(updates)
            # everything the frontier claims complete has been reported, exactly
            done = [u for u in history if frontier == () or u.time < frontier[0]]
            assert Counter(reported) == Counter(done)
    assert reader.violations == []
    assert reader.frontier == final_frontier
    assert Counter(reported) == Counter(history)
    assert reader.retained() == 0


garbage_update = st.builds(
    Update,
    rows,
    st.one_of(st.integers(-2, 8), st.none()),
    st.one_of(st.integers(-2, 2), st.none()),
)
garbage_progress = st.builds(
    Progress,
    st.lists(st.integers(-1, 8), max_size=2).map(tuple),
    st.lists(st.integers(-1, 8), max_size=2).map(tuple),
    st.lists(st.tuples(st.integers(-2, 9), st.integers(-2, 3)), max_size=4).map(tuple),
)


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.one_of(st.lists(garbage_update, max_size=5), garbage_progress), max_size=30))
def test_reader_never_raises_on_arbitrary_messages(messages):
    reader = CdcReader()
    last = reader.frontier
    for message in messages:
        for _updates, frontier in reader.push(message):
            # the frontier only moves forward
            assert last != () and (frontier == () or frontier[0] > last[0])
            last = frontier
    assert all(v.kind and v.detail for v in reader.violations)


# -- every statement against every other, and strict mode -----------------------------------


@st.composite
def history_with_a_wrong_statement(draw):
    """A valid mangled history, plus one statement that disagrees with the chain somewhere."""
    history, messages, final = draw(mangled_history())
    horizon = final[0] if final else max([u.time for u in history] + [0]) + 1
    counts = Counter(u.time for u in history)
    time = draw(st.integers(0, horizon - 1))
    lo = draw(st.integers(0, time))
    hi = draw(st.integers(time + 1, horizon))
    stated = {t: c for t, c in counts.items() if lo <= t < hi}
    stated[time] = stated.get(time, 0) + draw(st.integers(1, 3))  # off by at least one
    wrong = Progress((lo,), (hi,), tuple(sorted(stated.items())))
    at = draw(st.integers(0, len(messages)))  # anywhere: before, amid or after the reports
    return messages[:at] + [wrong] + messages[at:], time


@EXAMPLES
@given(history_with_a_wrong_statement())
def test_a_disagreeing_statement_is_reported_wherever_it_arrives(case):
    messages, time = case
    reader = CdcReader()
    for message in messages:
        reader.push(message)
    mismatches = [v for v in reader.violations if v.kind == "count_mismatch"]
    assert mismatches, "a statement contradicting the chain went unreported"
    assert time in {v.time for v in mismatches}


@st.composite
def history_with_late_non_duplicates(draw):
    """A valid history read to its end, then updates at reported times that are not duplicates."""
    history, messages, final = draw(mangled_history())
    if not history:
        history = []
    horizon = final[0] if final else max([u.time for u in history] + [0]) + 1
    known = {(u.data, u.time): u.diff for u in history}
    late = []
    for _ in range(draw(st.integers(1, 4))):
        time = draw(st.integers(0, horizon - 1))
        data = draw(st.one_of(st.sampled_from([d for d, t in known if t == time] or [99]), rows))
        diff = draw(st.integers(-3, 3).filter(lambda d, k=(data, time): d and d != known.get(k)))
        late.append(Update(data, time, diff))
    return messages, late, known


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history_with_late_non_duplicates(), st.sampled_from(["exact", "bloom"]))
def test_strict_reports_every_late_update_that_is_no_duplicate(case, strict):
    messages, late, known = case
    reader = CdcReader(strict=strict)
    for message in messages:
        reader.push(message)
    assert reader.violations == []
    reader.push(late)
    kinds_seen = [v.kind for v in reader.violations]
    expected, seen = [], set(known)
    for u in dict.fromkeys(late):  # a repeated late update is a duplicate of the first
        expected.append("conflicting_diff" if (u.data, u.time) in seen else "over_count")
        seen.add((u.data, u.time))
    # the Bloom filter misses a late update with probability 1e-3 at most (a false positive);
    # filters this small and keys this few make that astronomically rare
    assert kinds_seen == expected
    # and duplicates of the whole history never are violations
    for message in messages:
        reader.push(message)
    assert [v.kind for v in reader.violations] == expected


# -- CountingReader: the same verdicts from counts ----------------------------------------------


def counted(messages):
    """What a distributed reader hands :class:`CountingReader` for ``messages`` read in this order:
    per message its TimeCounts (placed where the time first appears) and malformed updates, and
    the later arrivals with their first diff, counted for the whole read; the data of each first
    arrival by (message index, time), for the caller's side of strict mode."""
    first = {}
    per_message, firsts = [], {}
    duplicates = 0
    for index, message in enumerate(messages):
        if isinstance(message, Progress):
            per_message.append(message)
            continue
        items, groups = [], {}
        for data, time, diff in message:
            if time < 0 or diff == 0:
                items.append(Update(data, time, diff))
                continue
            if time not in groups:
                groups[time] = [0, []]
                items.append(time)
            key = (data, time)
            if key not in first:
                first[key] = diff
                groups[time][0] += 1
                firsts.setdefault((index, time), []).append(Update(data, time, diff))
            elif first[key] == diff:
                duplicates += 1
            else:
                groups[time][1].append((data, first[key], diff))
        per_message.append(
            (
                [
                    item
                    if isinstance(item, Update)
                    else TimeCounts(item, groups[item][0], tuple(groups[item][1]))
                    for item in items
                ],
                len(message),
            )
        )
    return per_message, duplicates, firsts


noisy_update = st.builds(Update, rows, st.integers(-1, 12), st.integers(-2, 2))


@st.composite
def noisy_history(draw):
    """A mangled history with anything a wrong writer adds: conflicting diffs, new rows at
    reported times, malformed updates, disagreeing statements; messages with several times."""
    _history, messages, _final = draw(mangled_history())
    extra = draw(
        st.lists(
            st.one_of(
                st.lists(noisy_update, min_size=1, max_size=5),
                garbage_progress.filter(lambda p: len(p.lower) == 1),
            ),
            max_size=6,
        )
    )
    mixed = list(messages)
    for message in extra:
        mixed.insert(draw(st.integers(0, len(mixed))), message)
    return mixed


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(mangled_history().map(lambda case: case[1]), noisy_history()),
    st.sampled_from([None, "exact"]),
)
def test_counting_reader_decides_as_the_reader_does(messages, strict):
    reader, counting = CdcReader(strict=strict), CountingReader(strict=strict)
    per_message, duplicates, firsts = counted(messages)
    for index, (message, entry) in enumerate(zip(messages, per_message)):
        reader.push(message, partition=0, offset=index)
        if isinstance(entry, Progress):
            counting.push(entry, partition=0, offset=index)
        else:
            items, received = entry
            counting.push_counts(items, received=received, partition=0, offset=index)
        assert counting.frontier == reader.frontier
    counting.add_duplicates(duplicates)
    # strict: the data of late first arrivals, from the caller (one entry per late arrival)
    assert len(counting.late_violations) == (0 if strict is None else len(counting.late))
    for (_p, offset, time), (at, n) in zip(counting.late, counting.late_violations):
        for i, u in enumerate(firsts[(offset, time)][:n]):
            counting.violations[at + i] = counting.violations[at + i]._replace(
                detail=counting.late_detail(u.data, u.time, u.diff)
            )
    assert Counter(counting.violations) == Counter(reader.violations)
    assert (counting.messages, counting.updates_received, counting.duplicates) == (
        reader.messages,
        reader.updates_received,
        reader.duplicates,
    )
    assert counting.pending() == reader.pending()
    assert counting.held == reader.held


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(mangled_history().map(lambda case: case[1]), noisy_history()),
    st.sampled_from([None, "exact"]),
)
def test_a_message_taken_whole_is_judged_as_update_by_update(messages, strict):
    """Lists take the whole-message path where they can; tuples always take the loop. After
    every message both readers agree on everything, in the same order; a reader that reports
    no updates agrees on the rest."""
    whole, one_by_one = CdcReader(strict=strict), CdcReader(strict=strict)
    verdicts_only = CdcReader(strict=strict, report_updates=False)
    for index, message in enumerate(messages):
        as_tuple = message if isinstance(message, Progress) else tuple(message)
        got = whole.push(message, partition=0, offset=index)
        expected = one_by_one.push(as_tuple, partition=0, offset=index)
        bare = verdicts_only.push(message, partition=0, offset=index)
        assert bare == [([], f) for _u, f in expected]
        assert verdicts_only.violations == one_by_one.violations
        assert [(sorted(map(repr, u)), f) for u, f in got] == [
            (sorted(map(repr, u)), f) for u, f in expected
        ]
        assert all(type(u) is Update for updates, _f in got for u in updates)
        assert whole.violations == one_by_one.violations
        assert (whole.updates_received, whole.duplicates, whole.held) == (
            one_by_one.updates_received,
            one_by_one.duplicates,
            one_by_one.held,
        )
        assert whole.pending() == one_by_one.pending()
