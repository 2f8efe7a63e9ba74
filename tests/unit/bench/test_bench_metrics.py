"""Benchmark metrics: hand-computed values for vLLM bench serve's definitions."""

import math

import pytest

from blueprints.schema import SloSpec
from tasks.planning.metrics import RequestRecord, metric_value, percentile, summarize
from tests.unit.bench.helpers import record


def test_tpot_excludes_the_first_token():
    # 10 tokens, TTFT 0.1 s, last token at 1.0 s: (1.0 - 0.1) / (10 - 1) = 100 ms.
    s = summarize([record(0.1, 0.1, 10, send_ts=0.0)], 1.0, SloSpec())
    assert s.tpot.mean == pytest.approx(100.0)
    assert s.e2e.mean == pytest.approx(1000.0)
    assert s.ttft.mean == pytest.approx(100.0)


def test_tpot_differs_from_the_first_token_included_definition():
    # TTFT 0.55 s then 9 gaps of 50 ms: TPOT is 50 ms, while e2e / tokens would say 100 ms.
    s = summarize([record(0.55, 0.05, 10, send_ts=0.0)], 1.0, SloSpec())
    assert s.e2e.mean == pytest.approx(1000.0)
    assert s.tpot.mean == pytest.approx(50.0)


def test_tpot_counts_server_tokens_while_itl_counts_chunk_gaps():
    # 10 tokens arrive bundled in 4 chunks (speculative decoding): ITL sees 3 gaps of 300 ms.
    r = RequestRecord("isl-3k", 8, 0, 0.0, 0.1, (0.1, 0.4, 0.7, 1.0), 1.01, 3000, 10)
    s = summarize([r], 1.0, SloSpec())
    assert s.tpot.mean == pytest.approx(100.0)
    assert s.itl.count == 3
    assert s.itl.mean == pytest.approx(300.0)


def test_a_one_token_output_has_no_tpot_but_counts_for_ttft():
    s = summarize([record(0.2, 0.0, 1, send_ts=0.0), record(0.1, 0.1, 10, send_ts=0.0)], 1.0, SloSpec())
    assert s.ttft.count == 2
    assert s.tpot.count == 1
    assert s.tpot.mean == pytest.approx(100.0)


def test_e2e_ends_at_the_last_content_chunk_not_at_the_stream_end():
    r = RequestRecord("isl-3k", 8, 0, 0.0, 0.1, (0.1, 0.2), 5.0, 3000, 2)
    assert summarize([r], 1.0, SloSpec()).e2e.mean == pytest.approx(200.0)


def test_itl_pools_every_gap_of_every_request():
    a = RequestRecord("isl-3k", 8, 0, 0.0, 0.1, (0.1, 0.11, 0.13), 0.2, 3000, 3)   # gaps 10, 20 ms
    b = RequestRecord("isl-3k", 8, 0, 0.0, 0.1, (0.1, 0.13), 0.2, 3000, 2)          # gap 30 ms
    s = summarize([a, b], 1.0, SloSpec())
    assert s.itl.count == 3
    assert s.itl.mean == pytest.approx(20.0)


def test_percentiles_interpolate_linearly_like_numpy():
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert percentile([1, 2, 3, 4], 90) == pytest.approx(3.7)     # rank 2.7
    assert percentile([4, 1, 3, 2], 99) == pytest.approx(3.97)    # rank 2.97, input unsorted
    assert percentile([7], 99) == 7


def test_the_summary_gives_mean_percentiles_and_population_std_in_milliseconds():
    records = [record(t / 1000, 0.01, 2, send_ts=0.0) for t in (10, 20, 30, 40, 50)]
    ttft = summarize(records, 1.0, SloSpec()).ttft
    assert (ttft.count, ttft.mean, ttft.p50) == (5, pytest.approx(30.0), pytest.approx(30.0))
    assert ttft.p90 == pytest.approx(46.0)      # rank 3.6: 40 + 0.6 * 10
    assert ttft.p99 == pytest.approx(49.6)
    assert ttft.std == pytest.approx(math.sqrt(200.0))


def test_goodput_counts_only_completed_requests_meeting_every_slo():
    slo = SloSpec(ttft_ms=200, tpot_ms=50)
    records = [
        record(0.100, 0.020, 10),             # meets both
        record(0.300, 0.020, 10),             # TTFT too slow
        record(0.100, 0.060, 10),             # TPOT too slow
        record(0.100, 0.0, 1),                # one token: no TPOT, meets the TPOT SLO as in vLLM
        record(0, 0, 0, error="HTTP 500"),    # failed
    ]
    s = summarize(records, 2.0, slo)
    assert s.goodput == pytest.approx(2 / 2.0)
    assert s.request_throughput == pytest.approx(4 / 2.0)
    assert s.error_rate == pytest.approx(1 / 5)
    assert (s.requests, s.completed, s.failed) == (5, 4, 1)


def test_an_e2e_slo_also_limits_goodput():
    records = [record(0.1, 0.1, 10), record(0.1, 0.01, 10)]    # e2e 1000 ms and 190 ms
    assert summarize(records, 1.0, SloSpec(e2e_ms=500)).goodput == pytest.approx(1.0)


def test_without_slos_goodput_equals_request_throughput():
    s = summarize([record(0.1, 0.1, 10), record(9.0, 9.0, 3)], 4.0, SloSpec())
    assert s.goodput == s.request_throughput == pytest.approx(0.5)


def test_throughputs_count_server_tokens_of_completed_requests_over_the_duration():
    s = summarize([record(0.1, 0.01, 10), record(0.1, 0.01, 30), record(0, 0, 0, error="timeout")], 4.0,
                  SloSpec())
    assert s.output_tokens_per_s == pytest.approx(40 / 4.0)
    assert s.total_tokens_per_s == pytest.approx((40 + 2 * 3000) / 4.0)
    assert metric_value(s, "output_tokens_per_s") == s.output_tokens_per_s


def test_a_stream_that_never_sent_a_token_is_a_failure():
    r = RequestRecord("isl-3k", 8, 0, 0.0, None, (), 30.0, 3000, 0)
    s = summarize([r], 30.0, SloSpec())
    assert (s.completed, s.failed, s.error_rate) == (0, 1, 1.0)
    assert s.ttft.mean is None and metric_value(s, "ttft_p99") is None


def test_repeats_are_pooled_and_also_summarised_one_by_one():
    records = [record(0.1, 0.01, 10, repeat=0), record(0.1, 0.01, 10, repeat=0),
               record(0.3, 0.01, 10, repeat=1)]
    s = summarize(records, {0: 10.0, 1: 20.0}, SloSpec())
    assert s.request_throughput == pytest.approx(3 / 30.0)
    assert s.ttft.mean == pytest.approx(500 / 3)
    assert [r.request_throughput for r in s.repeats] == [pytest.approx(0.2), pytest.approx(0.05)]
    assert [r.ttft.mean for r in s.repeats] == [pytest.approx(100.0), pytest.approx(300.0)]


def test_several_repeats_need_a_duration_each():
    records = [record(0.1, 0.01, 10, repeat=0), record(0.1, 0.01, 10, repeat=1)]
    with pytest.raises(ValueError, match="duration per repeat"):
        summarize(records, 10.0, SloSpec())


def test_records_of_different_points_are_refused():
    with pytest.raises(ValueError, match="one \\(scenario, concurrency\\) point"):
        summarize([record(0.1, 0.01, 10, concurrency=1), record(0.1, 0.01, 10, concurrency=8)], 1.0, SloSpec())


def test_a_saturated_client_is_passed_through():
    assert summarize([record(0.1, 0.01, 10)], 1.0, SloSpec(), client_saturated=True).client_saturated
