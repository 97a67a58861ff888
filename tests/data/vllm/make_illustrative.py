"""Writes the illustrative vLLM benchmark_serving.py result files of this directory (see README.md).

The key set, key order and units are those benchmark_serving.py --save-result writes (vllm-project/vllm
commit 0049e29c41fd383bda519a3f250e3227713081ef, benchmarks/benchmark_serving.py: main() and benchmark()),
serialised as it does (json.dump, one line). The figures are NOT a measurement: per-request TTFTs and
inter-token gaps are drawn here, and every statistic is computed from them the way calculate_metrics()
does (numpy mean / median / std / linear-interpolated percentile, milliseconds), so the file is internally
consistent. Rerun with `python3 make_illustrative.py` to regenerate byte-identical files.
"""
import json
import random
import statistics


def pct(v, p):
    s = sorted(v)
    pos = p / 100 * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


def pstd(v):
    return statistics.pstdev(v)  # numpy's np.std (ddof=0)


def result(seed, n, rate, max_concurrency, ttft0, ttft_step, itl):
    rnd = random.Random(seed)
    input_lens = [rnd.randint(900, 1100) for _ in range(n)]
    output_lens = [rnd.randint(48, 80) for _ in range(n)]
    ttfts = [ttft0 + ttft_step * i + rnd.uniform(0, 0.004) for i in range(n)]
    itls = [[round(itl + rnd.uniform(-0.0006, 0.0006), 6) for _ in range(o - 1)] for o in output_lens]
    latencies = [t + sum(g) for t, g in zip(ttfts, itls)]
    gaps = [0.0] if rate == "inf" else [rnd.expovariate(rate) for _ in range(n)]
    starts = [sum(gaps[:i]) for i in range(n)] if rate != "inf" else [0.0] * n
    duration = max(s + l for s, l in zip(starts, latencies)) + 0.002
    tpots = [(l - t) / (o - 1) for l, t, o in zip(latencies, ttfts, output_lens)]
    flat = [x for g in itls for x in g]
    r = {"date": "20250301-120000", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct",
         "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": n, "request_rate": rate,
         "burstiness": 1.0, "max_concurrency": max_concurrency, "duration": duration, "completed": n,
         "total_input_tokens": sum(input_lens), "total_output_tokens": sum(output_lens),
         "request_throughput": n / duration, "request_goodput:": None,
         "output_throughput": sum(output_lens) / duration,
         "total_token_throughput": (sum(input_lens) + sum(output_lens)) / duration,
         "input_lens": input_lens, "output_lens": output_lens, "ttfts": ttfts, "itls": itls,
         "generated_texts": ["" for _ in range(n)], "errors": ["" for _ in range(n)]}
    for name, v in (("ttft", ttfts), ("tpot", tpots), ("itl", flat)):
        r[f"mean_{name}_ms"] = statistics.fmean(v) * 1000
        r[f"median_{name}_ms"] = statistics.median(v) * 1000
        r[f"std_{name}_ms"] = pstd(v) * 1000
        r[f"p99_{name}_ms"] = pct(v, 99) * 1000
    return r


for name, args in {"llama-3.1-8b-h100-inf.json": (1, 8, "inf", None, 0.060, 0.012, 0.0085),
                   "llama-3.1-8b-h100-rate4.json": (2, 8, 4.0, None, 0.045, 0.0, 0.0080)}.items():
    with open(name, "w", encoding="utf-8") as f:
        json.dump(result(*args), f)


# benchmark_latency.py --output-json (vllm-project/vllm commit 00db02095a5d578c18383609a00fa0c6e7fc8db8,
# main()): {"avg_latency", "latencies", "percentiles" {"10".."99"}}, json.dump(indent=4). Illustrative
# latencies of one batch (--batch-size 8 --input-len 32 --output-len 128, the script's defaults).
def latency(seed, n, center):
    rnd = random.Random(seed)
    lat = [center + rnd.uniform(-0.004, 0.004) for _ in range(n)]
    return {"avg_latency": statistics.fmean(lat), "latencies": lat,
            "percentiles": {str(p): pct(lat, p) for p in (10, 25, 50, 75, 90, 99)}}


with open("llama-3.1-8b-h100-latency-b8.json", "w", encoding="utf-8") as f:
    json.dump(latency(3, 30, 1.02), f, indent=4)
