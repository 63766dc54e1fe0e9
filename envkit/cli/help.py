"""What `--help` shows beyond the options: examples per command and the exit codes."""
from __future__ import annotations

EXIT_CODES = """Exit codes: 0 ok; 1 no solution, problems found or a check failed; 2 bad input (a flag, version or file);
3 matrix.toml invalid; 4 an outside tool or engine failed; 5 build preflight refused; 6 the server under test misbehaved;
70 envkit itself failed (a bug: re-run with -v and report it); 130 interrupted."""

EXAMPLES: dict[str, tuple[str, ...]] = {
    "resolve": (
        'envkit resolve --gpu "RTX 4090" --cuda 11.8 --torch 2.1.2 --vllm 0.2.7',
        "envkit resolve --gpu V100 --flash-attn 2            # no solution: the conflict, its source and fix",
        "envkit resolve --gpu H100 --cuda 12 --json          # the newest 12.x, as one JSON document",
    ),
    "generate": (
        "envkit generate --gpu H100 --flash-attn 2 --kernels layer_norm,rotary --dry-run",
        "envkit generate --gpu A100 --mirror site.toml -o ctx    # intranet mirrors only",
        "envkit generate --lock envkit.lock.json --offline -o ctx",
        "envkit generate --gpu H200 --cuda 13.0 --kernels rotary --kernels-from 2.7.4.post1 --toolkit pip --offline -o ctx",
    ),
    "lock": (
        "envkit lock --platform cpu --torch 2.13.0 -o envkit.lock.json   # every wheel by sha256, base images by digest",
        "envkit lock --gpu H100 --cuda 12.4 --mirror site.toml",
    ),
    "bundle": (
        "envkit bundle --gpu H100 --flash-attn 2 -o carry        # on a connected machine",
        "envkit bundle --lock envkit.lock.json --mirror site.toml -o carry",
        "envkit bundle --lock envkit.lock.json --locked -o carry # exactly the lock's wheels (pip --require-hashes)",
    ),
    "build": (
        "envkit build --offline --bundle carry --dry-run         # the preflight and plan, nothing built",
        "envkit build --offline --bundle carry -t llm:cu124",
        "envkit build --offline --bundle carry --locked --lock envkit.lock.json   # refuse what no longer matches",
        "envkit build --offline --bundle carry --export-wheels wheels   # the compiled wheels, with SHA256SUMS",
        "envkit build --project envkit.toml --all -j 2",
        "envkit build --mirror site.toml --secret netrc=~/.netrc   # an index that asks for a login (Podman or buildx)",
    ),
    "push": (
        "envkit push llm:tiny --to 127.0.0.1:5000/llm/tiny:v1",
        "echo \"$PASS\" | envkit push llm:tiny --to registry.intra/llm/tiny:v1 --username ci --password-stdin --json",
    ),
    "serve": (
        "envkit serve --image llm:tiny --env VLLM_CPU_KVCACHE_SPACE=1          # healthy, then prints the URL",
        "envkit serve --image llm:tiny --sweep --concurrency 1,4 --json        # sweep it, then stop it",
        "envkit serve --stop envkit-serve-1a2b3c4d",
    ),
    "selftest": (
        "envkit selftest --image llm:cu124 --quick",
        "envkit selftest --shape tiny --engine hf --report out/",
        "envkit selftest --engine openai:http://127.0.0.1:8000 --concurrency 1,4,16 --junit sweep.xml",
    ),
    "doctor": (
        "envkit doctor",
        'envkit doctor --for "--gpu H100 --torch 2.4 --flash-attn 2"',
        "envkit doctor --facts host.json --json",
    ),
    "inspect": ("envkit inspect llm:cu124",),
    "compare": (
        "envkit compare --engine vllm=openai:http://127.0.0.1:8000 --engine fastllm=chat:http://127.0.0.1:8080 --model-name tiny",
        "envkit compare --engine transformers=hf:./tiny --engine vllm=openai:http://127.0.0.1:8000 --concurrency 1,4,8 --markdown r.md --png r.png",
        "envkit compare --engine a=openai:http://127.0.0.1:8000 --dtype float16 --site \"A100 (lab)\" --json",
    ),
    "export": ("envkit matrix export --format github --project envkit.toml -o .github/workflows/images.yml",),
    "check": ("envkit matrix check", "envkit matrix check my-matrix.toml --json"),
    "refresh": ("envkit matrix refresh --check",),
    "show": ("envkit matrix show gpu", "envkit matrix show flash_attn"),
}


def epilog(command: str) -> str:
    lines = EXAMPLES.get(command, ())
    examples = "Examples:\n\n" + "\n".join(f"  {line}" for line in lines) + "\n\n" if lines else ""
    return examples + EXIT_CODES
