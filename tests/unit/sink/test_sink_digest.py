"""The digest header a progress statement carries: exact counts when few, their hash when many
(a header must fit in a message), compared the same way either way."""

from __future__ import annotations

import hashlib

from cdc_emitter.sink.digest import DIGEST_TIMES, digest_form, format_digest, parse_digest


def test_few_times_are_listed_and_read_back():
    counts = {5: 2, 3: 1}
    assert parse_digest(format_digest(-7, counts)) == (-7, ((3, 1), (5, 2)))
    assert digest_form(-7, ((3, 1), (5, 2))) == (-7, ((3, 1), (5, 2)))


def test_many_times_are_hashed_and_compare_equal_only_for_the_same_counts():
    counts = {t: 1 + t % 3 for t in range(DIGEST_TIMES + 1)}
    text = format_digest(2**63 + 5, counts)
    assert len(text) < 200
    parsed = parse_digest(text)
    assert parsed == digest_form(2**63 + 5 - 2**64, tuple(sorted(counts.items())))
    assert parsed[1][0] == "sha256" and parsed[1][2:] == (sum(counts.values()), DIGEST_TIMES + 1)
    other = {**counts, 0: 9}
    assert parse_digest(format_digest(2**63 + 5, other)) != parsed
    assert parse_digest("{not json") is None


def test_the_hash_of_many_counts_is_of_their_json_text():
    # a re-run compares with digests written by earlier versions: the hashed text never changes
    counts = tuple((t, 1 + t % 3) for t in range(DIGEST_TIMES + 1))
    text = "[" + ",".join(f"[{t},{n}]" for t, n in counts) + "]"
    assert digest_form(3, counts)[1][1] == hashlib.sha256(text.encode()).hexdigest()


def test_a_digest_of_another_version_is_not_compared():
    # written before update hashes became xxhash64(xxhash64(data, time), diff): no "v"
    assert parse_digest('{"xor":"0000000000000007","counts":[[3,1]]}') is None
    assert parse_digest('{"v":1,"xor":"0000000000000007","counts":[[3,1]]}') is None
    assert parse_digest(format_digest(7, {3: 1})) == (7, ((3, 1),))
