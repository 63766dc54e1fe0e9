"""`envkit compare`'s hf: engine: transformers decoding the comparison's prompts one at a time (batch 1), run as a
script by the Python that has torch and transformers (envkit's own, or --hf-python). Standard library at the top;
torch and transformers inside the functions.

    python compare_hf.py --check                         # {"torch": ..., "transformers": ...}, exit 1 without them
    python compare_hf.py MODEL_DIR DTYPE [--trust-remote-code] < requests.json

requests.json is a JSON list of [prompt, output length] pairs, each prompt a text or a list of token ids. One greedy
generate() of exactly that many new tokens (min_new_tokens, as the servers' ignore_eos) per request after one untimed
warm-up; each is timed
from the call to its return, synchronised on CUDA: the latency, prefill included, as a server's first byte to last
token. The generated text is the new tokens decoded without special tokens. Prints one JSON document on stdout:
{"device", "dtype", "torch", "transformers", "requests": [{"ok", "prompt_tokens", "output_tokens", "output_chars",
"latency_s", "error"}]}; a prompt that fails (out of memory) is a failed request, not a crash.
"""
from __future__ import annotations

import json
import sys
import time


def versions() -> dict:
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "cuda": bool(torch.cuda.is_available())}


def _sync(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def decode(model_dir: str, requests: list, dtype_name: str = "auto", trust_remote_code: bool = False) -> dict:
    import torch
    import transformers

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype_name == "auto":
        dtype_name = "bfloat16" if device == "cuda" else "float32"
    dtype = getattr(torch, dtype_name)
    tok = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True, trust_remote_code=trust_remote_code)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, local_files_only=True,
                                                              trust_remote_code=trust_remote_code).to(device).eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id if tok.eos_token_id is not None else 0)

    def ids_of(prompt):
        if isinstance(prompt, list):
            return torch.tensor([prompt], device=device)
        return tok(prompt, return_tensors="pt").input_ids.to(device)

    def generate(ids, n: int):
        with torch.inference_mode():
            return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                  pad_token_id=pad)

    generate(ids_of(requests[0][0]), 2)  # warm-up, untimed (as the servers' warm-up request)
    out = []
    for prompt, output_len in requests:
        ids = ids_of(prompt)
        row = {"ok": False, "prompt_tokens": int(ids.shape[1]), "output_tokens": 0, "output_chars": 0, "latency_s": 0.0, "error": ""}
        try:
            _sync(torch, device)
            t0 = time.perf_counter()
            seq = generate(ids, output_len)
            _sync(torch, device)
            row["latency_s"] = time.perf_counter() - t0
            new = seq[0, ids.shape[1]:]
            row.update(ok=True, output_tokens=int(new.shape[0]), output_chars=len(tok.decode(new, skip_special_tokens=True)))
        except Exception as exc:  # out of memory above all: a failed request, as a server's
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            if device == "cuda":
                torch.cuda.empty_cache()
        out.append(row)
    return {"device": device, "dtype": dtype_name, "torch": torch.__version__, "transformers": transformers.__version__, "requests": out}


def main(argv: list) -> int:
    if argv[:1] == ["--check"]:
        try:
            print(json.dumps(versions()))
        except Exception as exc:
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
            return 1
        return 0
    model_dir, dtype = argv[0], argv[1]
    requests = json.loads(sys.stdin.read())
    stdout = sys.stdout
    sys.stdout = sys.stderr  # what transformers prints goes to stderr; the document alone to stdout
    try:
        doc = decode(model_dir, requests, dtype, "--trust-remote-code" in argv[2:])
    except Exception as exc:  # the model could not be loaded: one line for envkit
        doc = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    finally:
        sys.stdout = stdout
    print(json.dumps(doc))
    return 0 if "error" not in doc else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
