"""Every command's options, declared once (as model/flags.py declares the resolve flags): their spelling, kind,
default and help. cli/options.py turns a command's list into its typer options; the option groups that several
commands take (the serving image's, the container engine's server layout, the site and lock files) are declared
here once and named in each list."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Collection, Literal, Optional, Sequence, Union

from envkit.inimage.build_flash_attn import DEFAULT_HOST_MARCH
from envkit.inimage.selftest import DECODERS, SHAPES

OptKind = Literal["text", "flag", "int", "float", "list", "choice", "argument"]
SERVE_PORT = 8000  # the serving image's port, unless --serve-port says otherwise (model/plan.py)


@dataclass(frozen=True)
class Opt:
    """One option: `key` is the name the command reads it by; an argument has no `names`."""
    key: str
    names: tuple[str, ...]
    help: str
    kind: OptKind = "text"
    default: Any = None
    metavar: Optional[str] = None
    minimum: Optional[float] = None
    envvar: Optional[str] = None
    show_default: Optional[Union[bool, str]] = None
    choices: tuple[str, ...] = ()
    required: bool = False

    def helped(self, help: str) -> Opt:
        """The same option, with this command's help."""
        return replace(self, help=help)


JSON = Opt("as_json", ("--json",), "print one stable JSON document", kind="flag", default=False)
MATRIX = Opt("matrix_path", ("--matrix",), "another matrix.toml (default: the built-in one)", metavar="MATRIX.toml")
LOCK = Opt("lock", ("--lock",), "an envkit.lock.json", metavar="envkit.lock.json")
MIRROR = Opt("mirror", ("--mirror",), "site mirror profile (SITE.toml)", metavar="SITE.toml")
JUNIT = Opt("junit_path", ("--junit",), "also write the outcome as JUnit XML", metavar="FILE.xml")
HOST_FACTS = Opt("host_facts", ("--host-facts",), "with --gpu auto: the GPU host's facts recorded there (envkit doctor --json > "
                 "FACTS.json) instead of this host's", metavar="FACTS.json")
FORCE = Opt("force", ("--force",), "replace an output directory envkit did not write", kind="flag")
FIND_LINKS = Opt("find_links", ("--find-links",), "local directory of wheels to use as well (repeatable)", kind="list")
TOOLKIT = Opt("toolkit", ("--toolkit",), "CUDA toolkit of the devel stage: the nvidia/cuda devel image, or NVIDIA's pinned PyPI "
              "wheels on the OS's own image (default: the site file's \\[cuda] toolkit, else image)", kind="choice",
              choices=("image", "pip"))
SERVE_HELP = "a serving image: vLLM's OpenAI server on this local model directory (config.json, tokenizer, weights)"
SERVING = (
    Opt("serve", ("--serve",), SERVE_HELP, metavar="MODEL_DIR"),
    Opt("served_model_name", ("--served-model-name",), "the model name clients ask for (default: the directory's name)", metavar="NAME"),
    Opt("serve_arg", ("--serve-arg",), "one argument for the server, after envkit's (repeatable), e.g. --serve-arg=--dtype=float32",
        kind="list", metavar="ARG"),
    Opt("model_mount", ("--model-mount",), "do not bake the weights in: the site mounts them at /opt/envkit/model", kind="flag"),
    Opt("serve_port", ("--serve-port",), "the port the server listens on in the container", kind="int", default=SERVE_PORT),
)
"""--serve and the options that go with it (generate, bundle)."""
ENGINE_SERVER = (
    Opt("tp", ("--tp",), "--engine triton-trtllm/trtllm/fastertransformer: tensor-parallel GPUs (server ranks; default 1)",
        kind="int", show_default=False),
    Opt("max_batch_size", ("--max-batch-size",), "--engine triton-trtllm/trtllm: the server's max batch size (default 64)",
        kind="int", show_default=False),
    Opt("from_wheel", ("--from-wheel",), "--engine trtllm: TensorRT-LLM's wheel (NVIDIA's index, or the site's \\[rewrite] of it) "
        "on NVIDIA's CUDA image", kind="flag"),
)
"""How a container engine's server is laid out (model/engines.py ENGINE_OPTIONS): generate."""

COMMAND_OPTIONS: dict[str, tuple[Opt, ...]] = {
    'resolve': (
        HOST_FACTS,
        JSON,
        MATRIX,
    ),
    'generate': (
        LOCK.helped('replay an envkit.lock.json instead of resolve flags'),
        MIRROR.helped('site mirror profile (SITE.toml)'),
        Opt('offline', ('--offline',), 'every artifact from the build context; refuse any network step', kind='flag'),
        Opt('out', ('-o', '--out'), 'output directory (the docker build context); - prints the Dockerfile alone', default='envkit-build'),
        Opt('host_march', ('--host-march',), f"replaces csrc/rotary's -march=native ('native' keeps it; default {DEFAULT_HOST_MARCH})",
            show_default=False),
        Opt('max_jobs', ('--max-jobs',), "nvcc jobs (default: from the builder's memory, ~5 GB each)", kind='int', minimum=1),
        Opt('nvcc_threads', ('--nvcc-threads',), 'threads per nvcc job (default: one per arch, max 4)', kind='int', minimum=1),
        TOOLKIT,
        *SERVING,
        *ENGINE_SERVER,
        Opt('dry_run', ('--dry-run',), 'show the plan; write nothing', kind='flag'),
        HOST_FACTS,
        JSON.helped('print the plan as JSON'),
        FORCE,
        MATRIX,
    ),
    'bundle': (
        LOCK.helped('bundle an envkit.lock.json instead of resolve flags (a pinned one: its wheels by sha256)'),
        Opt('locked', ('--locked',), 'refuse unless --lock pins every wheel and base image (envkit lock)', kind='flag'),
        MIRROR.helped("fetch through the site's mirrors (SITE.toml)"),
        FIND_LINKS,
        TOOLKIT,
        *SERVING,
        Opt('out', ('-o', '--out'), 'bundle directory', default='envkit-bundle'),
        HOST_FACTS,
        FORCE,
        JSON.helped('print a JSON summary'),
        MATRIX,
    ),
    'lock': (
        MIRROR.helped("resolve the wheels on the site's mirrors (SITE.toml)"),
        FIND_LINKS,
        Opt('out', ('-o', '--out'), 'the lock file to write (replaced whole)', default='envkit.lock.json'),
        HOST_FACTS,
        JSON.helped('print the lock document'),
        MATRIX,
    ),
    'build': (
        Opt('offline', ('--offline',), 'build a bundle with the network off', kind='flag'),
        Opt('bundle_dir', ('--bundle',), 'the bundle directory (with --offline)'),
        LOCK.helped('build an envkit.lock.json (mirror mode); with --offline --locked, the lock to hold the bundle to'),
        Opt('locked', ('--locked',), "refuse unless the bundle (its wheels by sha256, base images by ID) or the engine's base images still "
            "match the pinned lock (exit 5 for a bundle)", kind='flag'),
        MIRROR.helped("build against the site's mirrors (SITE.toml)"),
        Opt('project', ('--project',), 'project file with named targets (envkit.toml)'),
        Opt('target', ('--target',), 'build this target of --project'),
        Opt('all_targets', ('--all',), 'build every target of --project', kind='flag'),
        Opt('jobs', ('--jobs', '-j'), 'targets built at once (with --all)', kind='int', default=2, minimum=1),
        Opt('out', ('-o', '--out'), 'build context directory (mirror mode)', default='envkit-build'),
        TOOLKIT.helped(TOOLKIT.help + " (mirror mode)"),
        Opt('tag', ('--tag', '-t'), 'image name:tag (default envkit/<platform>:<torch>)'),
        Opt('network', ('--network',), 'network for mirror-mode RUN steps', kind='choice', default='bridge', choices=('bridge', 'host')),
        Opt('no_cache', ('--no-cache',), 'run every step again (no layer cache)', kind='flag'),
        Opt('dry_run', ('--dry-run',), 'run the preflight and show the plan; build nothing', kind='flag'),
        Opt('secret', ('--secret',), "a file a mirror's login is in, mounted by the steps that need it and never written into the image: "
            "netrc=~/.netrc for \\[pip] netrc = true, apt-netrc=FILE for \\[apt] netrc = true (docker's id=ID,src=FILE works too; needs "
            "Podman or docker buildx; repeatable)", kind='list', metavar='ID=FILE'),
        Opt('export_wheels', ('--export-wheels',), 'copy the wheels the build stage compiled (flash-attn, csrc kernels) into DIR, a new or '
            'empty directory, with their sha256 in DIR/SHA256SUMS', metavar='DIR'),
        Opt('sbom_dir', ('--sbom-dir',), "where the image's SBOM (IMAGE.cdx.json, CycloneDX 1.6) and provenance (IMAGE.intoto.json, "
            "SLSA v1) are written; the image carries the SBOM's sha256 as its io.envkit.sbom.sha256 label", default='envkit-sbom',
            metavar='DIR'),
        Opt('no_sbom', ('--no-sbom',), 'write no SBOM or provenance, and leave no SBOM label', kind='flag'),
        HOST_FACTS,
        JSON.helped('print a JSON summary (the log goes to stderr)'),
        MATRIX,
    ),
    'selftest': (
        Opt('image', ('--image',), 'run inside this built image (network none, GPUs passed in) instead of here'),
        Opt('quick', ('--quick',), 'the checks and a short decode: a verdict within a minute', kind='flag'),
        Opt('engines', ('--engine',), f"{', '.join(DECODERS)} (decoders; repeat), or openai:URL or triton:URL (the serving sweep)",
            kind='list'),
        Opt('shapes', ('--shape',), f"decode a random-weight model of this shape: {', '.join(SHAPES)} (repeat)", kind='list'),
        Opt('model', ('--model',), "a local model DIR to decode; with openai:URL, the served model name (default: the server's first, from "
            "/v1/models); with triton:URL, the model (default: ensemble)"),
        Opt('parity', ('--parity',), "compare each engine's logits with a float32 eager-attention reference", kind='flag'),
        Opt('lambada', ('--lambada',), 'LAMBADA jsonl: last-word accuracy of --model DIR per HF engine'),
        Opt('peak_gbs', ('--peak-gbs',), "the GPU's HBM peak in GB/s, where no image solution says it", kind='float', minimum=0.0),
        Opt('concurrency', ('--concurrency',), 'concurrency levels of the serving sweep', default='1,4,8,16'),
        Opt('num_prompts', ('--num-prompts',), 'requests per concurrency level', kind='int', default=64, minimum=1),
        Opt('input_len', ('--input-len',), "prompt tokens (default 128; decode, and the sweep's random workload)", kind='int', minimum=1),
        Opt('output_len', ('--output-len',), 'tokens generated per request (default 128; --quick 32)', kind='int', minimum=2),
        Opt('dataset', ('--dataset',), 'JSONL prompts ({"prompt": ..., "output_tokens": N}) for the sweep'),
        Opt('request_rate', ('--request-rate',), "the sweep's requests per second, sent as a Poisson process (seeded); inf sends them all "
            "at once. The concurrency still caps those in flight", kind='float', default=math.inf),
        Opt('ready_timeout', ('--ready-timeout',), "seconds to wait, in all, for the server to answer GET /v1/models (or /health; "
            "triton:URL: /v2/health/ready and the model's ready) before the sweep; then one line and exit 4", kind='float', default=60.0,
            minimum=0.0),
        Opt('request_timeout', ('--request-timeout',), 'seconds one streamed request may take, connecting to its last line (keep-alives do '
            'not extend it); past it the request fails', kind='float', default=300.0, metavar='S'),
        Opt('sweep_timeout', ('--sweep-timeout',), 'seconds the whole sweep may take, readiness wait to last level; requests it cuts or '
            'leaves unsent count as failed', kind='float', metavar='S', show_default='none'),
        Opt('api_key', ('--api-key',), "the server's API key, sent as Authorization: Bearer; never printed or written",
            envvar='OPENAI_API_KEY', show_default=False),
        JSON.helped("print the self-test's JSON document"),
        Opt('report', ('--report',), 'write the JSON (and for a sweep a PNG plot) into this directory'),
        JUNIT.helped('also write the checks as JUnit XML'),
        Opt('triton_parameters', ('--triton-parameters',), 'with triton:URL, send max_tokens, bad_words, stop_words and stream nested '
            'under "parameters" instead of top-level', kind='flag'),
        Opt('endpoint', ('--endpoint',), "with openai:URL, stream /v1/completions (default) or /v1/chat/completions (one user message per "
            "request; the random workload's token ids sent as words)", metavar='completions|chat', show_default=False),
        Opt('allow_cpu', ('--allow-cpu',), 'pass without a GPU though the image is built for one (only its CPU path is tested); without it '
            'a GPU image that sees no GPU fails', kind='flag'),
        Opt('dry_run', ('--dry-run',), 'with --image: print the container (GPU devices, groups, mounts) and what it must see, and run '
            'nothing', kind='flag'),
    ),
    'doctor': (
        Opt('deep', ('--deep',), 'also import torch and the compiled modules (in a subprocess, with a timeout)', kind='flag'),
        Opt('image', ('--image',), "judge this image's stack on this host's GPUs"),
        Opt('for_', ('--for',), 'would this stack work here? resolve flags as one string'),
        Opt('facts_file', ('--facts',), 'judge a recorded facts JSON instead of this host'),
        Opt('pythons', ('--python',), "judge this interpreter's stack (repeatable; the first is the one --for resolves for); default: the "
            "active environment, python3 on PATH, conda's environments", kind='list', metavar='PATH'),
        Opt('images', ('--images/--no-images',), 'also judge the envkit-built images on the engine, from their labels', kind='flag',
            default=True),
        Opt('dry_run', ('--dry-run',), "with --image: print the probe's container (GPU devices, groups, mounts) and run nothing",
            kind='flag'),
        JSON,
        JUNIT.helped('also write the findings as JUnit XML'),
        MATRIX,
    ),
    'inspect': (
        Opt('image', (), 'an image envkit built (it carries the io.envkit.solution label)', kind='argument', required=True),
        JSON,
        JUNIT.helped("also write doctor's findings as JUnit XML"),
        MATRIX,
    ),
    'serve': (
        Opt('image', ('--image',), 'a serving image (built with --serve MODEL_DIR)'),
        Opt('env', ('--env',), 'an environment variable for the server (repeatable)', kind='list', metavar='NAME=VALUE'),
        Opt('model_dir', ('--model-dir',), 'the model directory, for an image built with --model-mount (read-only)'),
        Opt('timeout', ('--timeout',), 'seconds the server may take to turn healthy (finite, above 0)', kind='float', default=900.0),
        Opt('shm_size', ('--shm-size',), "the container's /dev/shm (vLLM's processes share memory there; Docker's default 64m is too "
            "small)", default='2g'),
        Opt('sweep', ('--sweep',), 'once healthy, run the serving sweep against it, then stop it (unless --keep)', kind='flag'),
        Opt('keep', ('--keep',), 'with --sweep: leave the server running afterwards', kind='flag'),
        Opt('concurrency', ('--concurrency',), "the sweep's concurrency levels", default='1,4'),
        Opt('num_prompts', ('--num-prompts',), "the sweep's requests per level", kind='int', default=16, minimum=1),
        Opt('input_len', ('--input-len',), "the sweep's prompt tokens (default 128)", kind='int', minimum=1),
        Opt('output_len', ('--output-len',), "the sweep's tokens per request (default 128)", kind='int', minimum=2),
        Opt('stop', ('--stop',), 'stop a server envkit serve started (and its network)', metavar='CONTAINER'),
        Opt('allow_cpu', ('--allow-cpu',), 'start an image built for GPUs without them (else refused before it starts)', kind='flag'),
        Opt('dry_run', ('--dry-run',), "print the server's container (GPU devices, groups, mounts) and start nothing", kind='flag'),
        JSON.helped('print the server (and the sweep) as JSON'),
    ),
    'push': (
        Opt('image', (), 'the image to push (a tag or ID on this engine)', kind='argument', required=True),
        Opt('to', ('--to',), "where: the site's registry, repository and tag", required=True, metavar='REGISTRY/REPO[:TAG]'),
        Opt('username', ('--username',), "the registry login's user", envvar='ENVKIT_REGISTRY_USER'),
        Opt('password_stdin', ('--password-stdin',), 'read the password from stdin (else ENVKIT_REGISTRY_PASSWORD)', kind='flag'),
        Opt('lock_tag', ('--lock-tag',), "also push REPO:lock-<12 hex of the image's lock sha256>, a tag only that lock's build gets, "
            "unless the registry holds it already (then it stays)", kind='flag'),
        JSON.helped('print the pushed reference and digest as JSON'),
    ),
    'compare': (
        Opt('engines', ('--engine',), 'an engine to compare (repeat): NAME=openai:URL (/v1/completions, vLLM), NAME=chat:URL '
            '(/v1/chat/completions, fastllm) or NAME=hf:MODEL_DIR (transformers here, single batch only)', kind='list',
            metavar='NAME=KIND:TARGET'),
        Opt('model_name', ('--model-name',), "the served model's name, asked of every server, and the table's model column (default: the "
            "first server's first model, from /v1/models)", metavar='NAME'),
        Opt('concurrency', ('--concurrency',), "the servers' concurrency levels (1 is always run: it is the single batch)",
            default='1,4,8'),
        Opt('num_prompts', ('--num-prompts',), 'requests per level, the same prompts for every engine', kind='int', default=16, minimum=1),
        Opt('input_len', ('--input-len',), 'prompt tokens of the random workload', kind='int', default=128, minimum=1),
        Opt('output_len', ('--output-len',), 'tokens generated per request', kind='int', default=32, minimum=2),
        Opt('dataset', ('--dataset',), 'JSONL prompts ({"prompt": ..., "output_tokens": N}) instead of random token ids'),
        Opt('dtypes', ('--dtype',), 'the dtype column (repeat; NAME=DTYPE for one engine); hf: loads the weights as it (float32, float16, '
            'bfloat16; default auto: float32 on CPU, bfloat16 on CUDA)', kind='list', metavar='DTYPE|NAME=DTYPE'),
        Opt('site', ('--site',), 'the 环境/site column: where this ran, e.g. "CPU (this host)"', default='this host'),
        Opt('markdown', ('--markdown',), 'also write both tables as Markdown', metavar='FILE.md'),
        Opt('png', ('--png',), 'also write a chart of both tables', metavar='FILE.png'),
        JSON.helped('print the comparison as one JSON document'),
        Opt('ready_timeout', ('--ready-timeout',), 'seconds each server may take, in all, to answer GET /v1/models', kind='float',
            default=60.0, minimum=0.0),
        Opt('request_timeout', ('--request-timeout',), 'seconds one streamed request may take, connecting to its last line (keep-alives do '
            'not extend it); past it the request fails', kind='float', default=300.0, metavar='S'),
        Opt('seed', ('--seed',), 'seed of the random workload', kind='int', default=0),
        Opt('api_key', ('--api-key',), "the servers' API key, sent as Authorization: Bearer; never printed or written",
            envvar='OPENAI_API_KEY', show_default=False),
        Opt('hf_python', ('--hf-python',), "the Python with torch and transformers that runs hf: engines (default: envkit's own)",
            metavar='PYTHON'),
        Opt('trust_remote_code', ('--trust-remote-code',), 'hf: models with their own code (Qwen-7B-Chat)', kind='flag'),
    ),
    'matrix export': (
        Opt('fmt', ('--format',), 'what to write', kind='choice', required=True, choices=('github', 'gitlab', 'bake', 'json', 'k8s')),
        Opt('project', ('--project',), 'the project file with the targets', default='envkit.toml'),
        Opt('out', ('-o', '--out'), 'write here instead of stdout'),
        Opt('contexts', ('--contexts',), "bake: where the targets' build contexts are", default='envkit-contexts'),
        MATRIX.helped('the matrix.toml the targets are resolved with (default: the built-in one)'),
    ),
    'matrix check': (
        Opt('path', (), 'matrix.toml to check (default: the built-in one)', kind='argument'),
        JSON.helped('print the verdict (or every problem with its line) as one JSON document'),
        MATRIX.helped('the same as PATH, spelled as every other command spells it'),
    ),
    'matrix refresh': (
        Opt('check', ('--check',), 'change nothing; exit 1 if matrix.toml differs from what the sources derive', kind='flag'),
        Opt('sources', ('--sources',), 'the extracts (default: data/sources beside matrix.toml)'),
        MATRIX.helped('the matrix.toml to refresh (default: the built-in one)'),
        JSON,
    ),
    'matrix show': (
        Opt('table', (), 'cuda, gpu, torch, rocm, dtk, flash_attn, vllm, python, os', kind='argument'),
        MATRIX,
        JSON.helped('print the tables as one JSON document (columns and rows of text)'),
    ),
}


# ---------------------------------------------------------------- what --help shows beyond the options
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
        "envkit compare --engine transformers=hf:./tiny --engine vllm=openai:http://127.0.0.1:8000 --concurrency 1,4,8 --markdown r.md "
        "--png r.png",
        "envkit compare --engine a=openai:http://127.0.0.1:8000 --dtype float16 --site \"A100 (lab)\" --json",
    ),
    "export": ("envkit matrix export --format github --project envkit.toml -o .github/workflows/images.yml",),
    "check": ("envkit matrix check", "envkit matrix check my-matrix.toml --json"),
    "refresh": ("envkit matrix refresh --check",),
    "show": ("envkit matrix show gpu", "envkit matrix show flash_attn"),
}


def epilog(command: str) -> str:
    """What `--help` shows after a command's options: its examples and the exit codes."""
    lines = EXAMPLES.get(command, ())
    examples = "Examples:\n\n" + "\n".join(f"  {line}" for line in lines) + "\n\n" if lines else ""
    return examples + EXIT_CODES


_VALUED_GLOBALS = {"--progress"}


def command_word(args: Sequence[str], commands: Collection[str]) -> Optional[str]:
    """The command word of the arguments (after the global options), where it is one of `commands`; None for --help,
    --version, shell completion and the rest."""
    it = iter(args)
    for a in it:
        if a in _VALUED_GLOBALS:
            next(it, None)
        elif a.startswith("-"):
            if a in ("--help", "--version") or a.startswith("--install-completion") or a.startswith("--show-completion"):
                return None
        else:
            return a if a in commands else None
    return None
