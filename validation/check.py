#!/usr/bin/env python3
"""Validate validation/measurements.csv and print row counts.

Checks: exact header; unique ids; role rule (calibration rows must be dense models,
prediction rows must be MoE models); value numeric and > 0; metric/unit pairs known;
non-empty source_url and locator; integer token/batch/device columns; an `excluded`
cell, where given, says why in words (moesim then lists the row as not predicted).

Dense-vs-MoE is decided from moesim's model zoo (model/zoo/<id>.json): a model whose
config has a routed-expert count > 1 (num_local_experts, num_experts, n_routed_experts,
ffn_config.moe_num_experts, or the same keys under text_config) is MoE. Models that are
not in the zoo (rows then carry the Hugging Face repo id) are classified by the
NON_ZOO table below; an unknown model is an error.
Usage: python3 validation/check.py [path/to/measurements.csv]
"""
import csv, json, os, sys
from collections import Counter

HEADER = ["id", "role", "model", "hf_repo", "format", "hardware", "hw_family", "devices",
          "runtime", "runtime_version", "batch", "prompt_tokens", "output_tokens",
          "context_depth", "step_tokens", "metric", "value", "unit", "source_url", "locator", "excluded"]
UNITS = {"decode_tokens_per_s": "tokens/s", "prefill_tokens_per_s": "tokens/s",
         "output_throughput_tokens_per_s": "tokens/s", "total_throughput_tokens_per_s": "tokens/s",
         "ttft_ms": "ms", "tpot_ms": "ms", "requests_per_s": "requests/s"}
ROLES = {"calibration": "dense", "prediction": "moe"}
HW_FAMILIES = {"apple-m", "nvidia-datacenter", "nvidia-desktop", "amd", "cpu", "other"}
RUNTIMES = {"llama.cpp-metal", "llama.cpp-cuda", "llama.cpp-vulkan", "llama.cpp-rocm", "llama.cpp-cpu",
            "mlx", "vllm", "sglang", "tensorrt-llm", "exo", "other"}
# Models outside moesim's zoo: Hugging Face repo id -> "dense" | "moe".
NON_ZOO = {
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "moe",      # 16 routed experts + shared
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": "moe",  # 128 routed experts + shared
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": "moe",             # Qwen3-30B-A3B architecture
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "moe",              # Qwen3-30B-A3B architecture
    "deepseek-ai/DeepSeek-R1": "moe",                        # DeepSeek-V3 architecture
    "deepseek-ai/DeepSeek-R1-0528": "moe",
    "zai-org/GLM-4.5-Air": "moe",
    "meta-llama/Llama-3.3-70B-Instruct": "dense",
    "meta-llama/Llama-2-7b-hf": "dense",
    "meta-llama/Meta-Llama-3-8B": "dense",
    "meta-llama/Meta-Llama-3-70B": "dense",
    "jeff31415/TinyLlama-1.1B-1T-OpenOrca": "dense",
    "Qwen/Qwen3-4B-Instruct-2507": "dense",
    "deepseek-ai/DeepSeek-V2-Lite-Chat": "moe",              # 64 routed experts + 2 shared
    "Qwen/Qwen3.5-35B-A3B": "moe",
    "zai-org/GLM-4.6": "moe",                                # GLM-4.5 architecture
    "meta-llama/Llama-3.2-3B-Instruct": "dense",
    "Qwen/Qwen2.5-Coder-7B": "dense",
    "Qwen/Qwen3-8B": "dense",
    "Qwen/Qwen3-32B": "dense",
    "mistralai/Mistral-7B-v0.1": "dense",
    "google/gemma-3-4b-it": "dense",
}
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def zoo_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(here), "model", "zoo")


def routed_experts(cfg):
    best = 0
    for k, v in cfg.items():
        if k in EXPERT_KEYS and isinstance(v, int):
            best = max(best, v)
        elif isinstance(v, dict) and k in ("ffn_config", "text_config"):
            best = max(best, routed_experts(v))
    return best


def arch_of(model, cache={}):
    if model in cache:
        return cache[model]
    path = os.path.join(zoo_dir(), model + ".json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            arch = "moe" if routed_experts(json.load(f).get("config", {})) > 1 else "dense"
    else:
        arch = NON_ZOO.get(model)
    cache[model] = arch
    return arch


def is_int(s, allow_empty):
    if s == "":
        return allow_empty
    return s.isdigit()


def main(path):
    errors = []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        if header != HEADER:
            print("bad header: %r" % header)
            return 1
        rows = [dict(zip(HEADER, r)) for r in reader if len(r) == len(HEADER) or errors.append("wrong field count: %r" % r[:1])]
    seen = set()
    for i, r in enumerate(rows, start=2):
        where = "line %d (%s)" % (i, r["id"])
        if not r["id"] or r["id"] in seen:
            errors.append("%s: empty or duplicate id" % where)
        seen.add(r["id"])
        if r["role"] not in ROLES:
            errors.append("%s: role %r" % (where, r["role"]))
        arch = arch_of(r["model"])
        if arch is None:
            errors.append("%s: model %r is neither in the zoo nor in NON_ZOO" % (where, r["model"]))
        elif r["role"] in ROLES and ROLES[r["role"]] != arch:
            errors.append("%s: role %s needs a %s model, %s is %s" % (where, r["role"], ROLES[r["role"]], r["model"], arch))
        if r["metric"] not in UNITS or UNITS[r["metric"]] != r["unit"]:
            errors.append("%s: metric/unit %s/%s" % (where, r["metric"], r["unit"]))
        try:
            if not float(r["value"]) > 0:
                errors.append("%s: value not > 0" % where)
        except ValueError:
            errors.append("%s: value %r not numeric" % (where, r["value"]))
        if r["hw_family"] not in HW_FAMILIES:
            errors.append("%s: hw_family %r" % (where, r["hw_family"]))
        if r["runtime"] not in RUNTIMES:
            errors.append("%s: runtime %r" % (where, r["runtime"]))
        # batch empty: offline max-load or open-loop request streams; token counts empty:
        # variable-length dataset (ShareGPT etc.), totals are in the locator.
        for col, empty_ok in (("devices", False), ("batch", True), ("prompt_tokens", True),
                              ("output_tokens", True), ("context_depth", False), ("step_tokens", True)):
            if not is_int(r[col], empty_ok):
                errors.append("%s: %s %r not an integer" % (where, col, r[col]))
        for col in ("model", "hf_repo", "format", "hardware", "source_url", "locator"):
            if not r[col].strip():
                errors.append("%s: empty %s" % (where, col))
        if not r["source_url"].startswith("https://"):
            errors.append("%s: source_url not https" % where)
        if r["excluded"] and not r["excluded"].strip():
            errors.append("%s: excluded is blank; say why the row is kept out, or leave it empty" % where)
    print("rows: %d" % len(rows))
    for col in ("role", "hw_family", "runtime", "metric"):
        c = Counter(r[col] for r in rows)
        print("%s: %s" % (col, ", ".join("%s=%d" % kv for kv in sorted(c.items()))))
    pred = [r for r in rows if r["role"] == "prediction"]
    print("prediction rows by hw_family: %s" % ", ".join("%s=%d" % kv for kv in sorted(Counter(r["hw_family"] for r in pred).items())))
    print("prediction rows by runtime: %s" % ", ".join("%s=%d" % kv for kv in sorted(Counter(r["runtime"] for r in pred).items())))
    print("models: %s" % ", ".join("%s=%d" % kv for kv in sorted(Counter(r["model"] for r in rows).items())))
    print("sources: %d distinct source_url" % len(set(r["source_url"] for r in rows)))
    print("excluded rows (listed as not predicted, with why): %d" % sum(1 for r in rows if r["excluded"]))
    for e in errors:
        print("ERROR " + e)
    print("OK" if not errors else "%d errors" % len(errors))
    return 1 if errors else 0


if __name__ == "__main__":
    default = os.path.join(os.path.dirname(os.path.abspath(__file__)), "measurements.csv")
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else default))
