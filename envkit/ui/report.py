"""Rendering for people: rich tables. (Machines get the JSON documents of the result objects.)"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Optional, Union

from packaging.version import Version
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from envkit.model.flags import FLAG
from envkit.model.matrix import Matrix, dtk_text
from envkit.model.redact import printable
from envkit.model.solution import Result
from envkit.ui import settings

if TYPE_CHECKING:
    from envkit.app.build import Built, DryRun
    from envkit.app.inspect import Inspected
    from envkit.app.matrix import Checked, Refreshed

RULE_STYLE = "bold red"

# Every value printed here that is not one of envkit's own literals (flag values, matrix strings, facts, findings,
# self-test checks, sweep notes, paths) goes through _e (rich.markup.escape) or into a rich Text, so that `[/]` or
# `[red]x[/red]` in it is shown as written (newcomer review D10, fuzz report 14).
Cell = Union[str, Text, None]


def _console(stderr: bool = False) -> Console:
    return settings.console(stderr)


def _e(value: object) -> str:
    """A value that did not come from envkit's literals, safe inside rich markup."""
    return escape(str(value))


def _row(t: Table, *cells: Cell) -> None:
    """A table row whose plain strings are shown as written (no markup); styled cells come as Text."""
    t.add_row(*(c if isinstance(c, Text) else "" if c is None else _e(c) for c in cells))


def _ok(ok: object) -> Text:
    return Text("ok", style="green") if ok else Text("FAIL", style="bold red")


def _print_engine(c: Console, d: dict[str, Any]) -> None:
    """A container engine's answer: the image, what it carries, and how it is built."""
    t = Table(title=f"envkit resolve: --engine {d['engine']}" + (" (legacy)" if d["legacy"] else ""), show_header=True, header_style="bold")
    t.add_column("component")
    t.add_column("choice")
    t.add_column("artifact / detail", overflow="fold")
    if d["gpu"]:
        _row(t, "gpu", d["gpu"]["name"], d["gpu"]["arch"])
    build = {"container": "used as it is", "backend": "the backend is built on it"}.get(d["build"], d["build"])
    _row(t, "image", d["image"], build)
    tr = d["triton"]
    if tr:
        _row(t, "triton", tr["release"] + (f" (server {tr['server']})" if tr["server"] else ""),
             " ".join(f"{k} {tr[k]}" for k in ("cuda", "python", "torch", "tensorrt") if tr.get(k)))
    if d["min_driver"]:
        _row(t, "driver", f">= {d['min_driver']}", "the container's requirement")
    if d["trtllm"]:
        r = d["trtllm"]
        _row(t, "tensorrt-llm", r["version"], " ".join(f"{k} {r[k]}" for k in ("torch", "tensorrt", "cuda") if r.get(k))
             + (f" archs {','.join(r['archs'])}" if r["archs"] else ""))
    if d["backend"]:
        b = d["backend"]
        _row(t, "tensorrtllm_backend", b["version"], f"TensorRT-LLM submodule {b['tensorrt_llm_commit'][:12]}")
    if tr and tr.get("vllm"):
        _row(t, "vllm", tr["vllm"], "")
    if d["sm"]:
        _row(t, "-DSM", ",".join(d["sm"]), "FasterTransformer's build archs")
    _row(t, "workflow", d["workflow"], "")
    c.print(t)
    for n in d["notes"]:
        c.print(f"  note: {escape(n)}")


def print_engine_context(result: Result, plan, out: Optional[str], files: list[str], console: Optional[Console] = None) -> None:
    """What generate wrote for a container engine: the answer, its plan's stages and steps, then the files."""
    c = console or _console()
    print_result(result, c)
    _print_stages(c, plan)
    c.print(f"{'wrote' if out else 'would write'} {len(files)} files" + (f" to {_e(out)}" if out else "") + ": "
            + _e(", ".join(f for f in files if not f.startswith("model_repo/")))
            + (f" and the model repository ({sum(f.startswith('model_repo/') for f in files)} files in model_repo/)"
               if any(f.startswith("model_repo/") for f in files) else ""))


def print_result(result: Result, console: Optional[Console] = None) -> None:
    """resolve's answer: what --gpu auto read, then the solution (or a container engine's answer, or the conflicts
    with their fixes and sources), then the warnings."""
    c = console or _console()
    if result.host_read:
        read = dict(result.host_read)
        c.print(_e(f"--gpu auto read {read.pop('from')}: " + "; ".join(f"{k} {v}" for k, v in read.items())), markup=False, highlight=False)
    if result.solution is not None:
        _print_solution(c, result.solution)
    elif result.engine is not None:
        _print_engine(c, result.engine.to_json())
    else:
        _print_conflicts(c, result)
    for n in result.notes:
        c.print(f"  note: {escape(n)}")
    for w in result.warnings:
        c.print(f"  [yellow]warning:[/] {escape(w)}")


def _print_solution(c: Console, sol: Any) -> None:
    d = sol.to_json()
    t = Table(title="envkit resolve: solution", show_header=True, header_style="bold")
    t.add_column("component")
    t.add_column("choice")
    t.add_column("artifact / detail", overflow="fold")
    if d["gpu"]:
        _row(t, "gpu", f"{d['gpu']['name']}", d["gpu"]["arch"])
    if d.get("machine"):
        _row(t, "cpu architecture", d["machine"], "Linux aarch64 wheels; linux/arm64 images (build on an Arm host)")
    tk = d["toolkit"]
    _row(t, "platform", d["platform"], f"{tk['kind']} {tk['release']}" if tk else "")
    if d["min_driver"]:
        _row(t, "driver", f">= {d['min_driver']}", "the lowest driver this stack runs on (the notes say why)")
    if d["images"]["devel"]:
        _row(t, "base images", "devel / runtime", f"{d['images']['devel']}\n{d['images']['runtime']}")
    if sol.toolkit_wheels and sol.cuda is not None:
        from envkit.core.planner.context import NVCC_WHEEL_SINCE

        if sol.cuda.version >= NVCC_WHEEL_SINCE:  # before, the wheels hold no nvcc: --toolkit pip cannot build, no row
            _row(t, "toolkit wheels", "--toolkit pip", " ".join(w.pin for w in sol.toolkit_wheels)
                 + "\n(NVIDIA's PyPI wheels of this release, instead of the devel image)")
    _row(t, "python", d["python"], "")
    tt = d["torch"]
    _row(t, "torch", tt["pin"], (tt["index_url"] or tt["wheel"] or "") + f"\ncxx11abi={tt['cxx11abi']}")
    _solution_packages(t, d)
    c.print(t)
    for n in d["notes"]:
        c.print(f"  note: {escape(n)}")


def _solution_packages(t: Table, d: dict[str, Any]) -> None:
    """The rows after torch: flash-attn, vLLM, the engine and the csrc kernels."""
    if d["flash_attn"]:
        f = d["flash_attn"]
        detail = f["wheel"] if f["build"] == "wheel" else f"build from source for {';'.join(f['arch_list'])}"
        _row(t, "flash-attn", f"{f['version']} ({f['build']})", detail)
    if d["vllm"]:
        _row(t, "vllm", d["vllm"]["version"], d["vllm"]["wheel"] or "build from source")
    if d.get("engine"):
        e = d["engine"]
        b = e.get("build")
        target = f" for sm_{b['cuda_arch']}" if b and b.get("cuda_arch") else ""
        how = f"compiled from {b['tag']} ({b['commit'][:12]}){target}: {b['archive']}" if b else " ".join(e["packages"] + e["no_deps"])
        _row(t, "engine", f"{e['engine']} {e['version']}" + (" (source)" if b else ""), how)
    for k in d["kernels"]:
        _row(t, f"kernel {k['name']}", k["module"], f"from flash-attn {k['flash_attn_sdist']} sdist, setup.py {k['setup_py']}, "
             f"archs {';'.join(k['arch_list'])}")


def _print_conflicts(c: Console, result: Result) -> None:
    asked = " ".join(f"{FLAG[k]} {v!r}" for k, v in result.query.given)
    c.print(f"[{RULE_STYLE}]no consistent stack[/] for {_e(asked or 'the default target')}")
    t = Table(show_header=True, header_style="bold")
    t.add_column("rule", style="red")
    t.add_column("conflict", overflow="fold")
    t.add_column("fix", overflow="fold")
    for x in result.conflicts:
        _row(t, x.rule, x.message, x.fix)
    c.print(t)
    for x in result.conflicts:
        c.print(f"  source of {_e(x.rule)}: {_e(x.source)}")
    for key, sol in result.suggestions:
        c.print(f"  without {FLAG[key]}: " + _e(", ".join(f"{k} {v}" for k, v in sol.items())))


def _matrix_tables(m: Matrix) -> dict[str, tuple[str, tuple[str, ...], list[tuple[str, ...]]]]:
    """name -> (title, columns, rows) for `envkit matrix show`."""
    def dtk_builds(version: object) -> str:
        return "\n".join(b.pin for b in m.torch if b.platform == "dtk" and b.toolkit == version)

    return {
        "cuda": ("CUDA toolkits", ("cuda", "min driver (MVC)", "toolkit driver", "archs", "devel image"),
                 [(str(x.version), str(x.min_driver), str(x.toolkit_driver or ""), " ".join(a.sm for a in x.archs), x.devel_image)
                  for x in m.cuda]),
        "gpu": ("GPUs", ("name", "aliases", "vendor", "arch", "memory GB", "bandwidth GB/s"),
                [(g.name, ", ".join(g.aliases), g.vendor, g.arch, f"{g.memory_gb:g}", f"{g.bandwidth_gbs:g}" if g.bandwidth_gbs else "?")
                 for g in m.gpus]),
        "torch": ("torch builds", ("torch", "variant", "python", "archs", "cxx11abi", "confidence"),
                  [(str(b.version), b.variant + (" (PyPI)" if b.pypi else ""), str(b.python),
                    (" ".join(b.archs) + (f" +PTX{b.ptx}" if b.ptx else "")) if b.archs_known else "not stated",
                    str(b.cxx11abi), b.confidence) for b in m.torch]),
        "rocm": ("ROCm", ("rocm", "image"), [(str(r.version), r.devel_image or "none known") for r in m.rocm]),
        "dtk": ("Hygon DTK", ("dtk", "rocm base", "torch builds", "image (public example)"),
                [(dtk_text(d.version), d.rocm, dtk_builds(d.version), d.image_hint) for d in m.dtk]),
        "flash_attn": ("flash-attn", ("version", "python", "torch", "nvcc", "wheel name", "wheels built (torch+cu)", "archs", "rocm",
                                      "csrc kernels"),
                       [(str(f.version), str(f.python), str(f.torch), str(f.nvcc),
                         "none" if f.wheel_format is None else f"cu{'XY' if f.wheel_format == 'major_minor' else 'X'}"
                         + "".join(f" {r.cuda_major or ''}{'torch' + r.torch if r.torch else ''}->{r.to}" for r in f.wheel_remap),
                         {"workflow": " ".join(f"{minor}+cu{cuda}" for _v, minor, cuda
                                               in sorted({(Version(w.torch_minor), w.torch_minor, w.cuda) for w in f.wheels})),
                          "none": "-", "unknown": "unknown (no workflow snapshot)"}[f.wheel_set],
                         " ".join(f"{a}({spec})" for a, spec in f.archs),
                         " ".join(f.rocm_archs) + (f" ROCm{f.rocm}" if f.rocm else ""),
                         ",".join(f.kernels) + ("" if f.kernel_setup_py else " (no setup.py)")) for f in m.flash_attn]),
        "vllm": ("vLLM", ("version", "torch", "python", "PyPI wheel CUDA", "CUDA archs", "other builds", "ROCm GPUs"),
                 [(str(v.version), str(v.torch), str(v.python),
                   str(v.wheel_cuda or (f"{v.wheel_cuda_major}.x" if v.wheel_cuda_major else "?")),
                   " ".join(map(str, v.cuda_archs)) + (f" +PTX{v.cuda_ptx}" if v.cuda_ptx else "") if v.cuda_archs else "not stated",
                   " ".join(f"cu{x.toolkit}" for x in v.variants) + "".join(f" rocm{x.toolkit}" for x in v.rocm_wheels),
                   " ".join(v.rocm_archs)) for v in m.vllm]),
        "python": ("CPython", ("python", "tarball"), [(str(p.version), p.tarball) for p in m.python]),
        "os": ("base image OS", ("os", "family", "python", "cpu image"),
               [(o.name, o.family, str(o.python), o.cpu_image or "") for o in m.os]),
    }


def matrix_tables(m: Matrix, table: Optional[str]) -> dict[str, tuple[str, tuple[str, ...], list[tuple[str, ...]]]]:
    """The tables `matrix show` prints: all, or the one named (flash-attn as the CLI spells it, or flash_attn)."""
    from envkit.errors import InputError

    tables = _matrix_tables(m)
    if table is None:
        return tables
    name = table.strip().lower().replace("-", "_")
    if name not in tables:
        raise InputError(f"unknown table {table!r}", f"use one of {', '.join(tables)}")
    return {name: tables[name]}


def print_matrix(m: Matrix, table: Optional[str], console: Optional[Console] = None) -> None:
    c = console or _console()
    for name, (title, columns, rows) in matrix_tables(m, table).items():
        t = Table(title=title)
        for col in columns:
            t.add_column(col, overflow="fold")
        for row in rows:
            _row(t, *row)
        c.print(t)


NET_STYLE = {"none": "green", "site": "cyan", "internet": "yellow"}


def _print_stages(c: Console, plan) -> None:
    """A plan's stages (a pip stack's or a container engine's), each step with why and what it reaches; what the
    context must carry."""
    for stage in plan.stages:
        t = Table(title=_e(f"stage {stage.name}: FROM {stage.image}"), title_justify="left", show_header=True, header_style="bold")
        t.add_column("#", justify="right")
        t.add_column("step", overflow="fold")
        t.add_column("why", overflow="fold")
        t.add_column("network", overflow="fold", min_width=12)  # the URLs a step reaches, whole (newcomer D5)
        for i, st in enumerate(stage.steps, 1):
            net = st.network + (f"\n{' '.join(st.reaches)}" if st.reaches else "")
            _row(t, str(i), st.title, st.why, Text(net, style=NET_STYLE.get(st.network, "")))
        c.print(t)
    if plan.carried:
        t = Table(title="the build context must hold", title_justify="left", header_style="bold")
        t.add_column("path", no_wrap=True)
        t.add_column("what", overflow="fold")
        t.add_column("from", overflow="fold")
        for item in plan.carried:
            _row(t, item.path, item.what, item.origin)
        c.print(t)


def print_plan(plan, out: Optional[str], files: list[str], console: Optional[Console] = None) -> None:
    """The build plan as a reviewer reads it: stages, each step with why it is there and what it reaches."""
    c = console or _console()
    c.print(f"[bold]envkit generate[/bold]: {_e(plan.stack)}")
    mode = "offline (build context only)" if plan.options.offline else (f"site {plan.site.path}" if plan.site.given else "internet")
    c.print(_e(f"network: {mode}; python: {plan.python_source}"))
    _print_stages(c, plan)
    if plan.build_args:
        c.print("build args (never written into a layer): " + _e(" ".join(f"--build-arg {k}=..." for k, _ in plan.build_args)))
    for w in plan.warnings:
        c.print(f"  [yellow]warning[/yellow]: {_e(w)}")
    if out:
        c.print(_e(f"wrote {len(files)} files to {out}/: {', '.join(files)}"))
    else:
        c.print(_e(f"dry run: would write {', '.join(files)}"))


def print_bundle(report, console: Optional[Console] = None) -> None:
    c = console or _console()
    if report.complete_already:
        c.print(_e(f"bundle {report.out}/ is complete: {report.files} files, {report.bytes / 2**20:.0f} MiB verified; nothing downloaded"))
        return
    c.print(_e(f"bundle {report.out}/: {report.files} files, {report.bytes / 2**20:.0f} MiB; "
               f"{len(report.downloaded)} fetched, {len(report.reused)} already there; manifest.json lists every sha256"))


def print_build(outcome: Union[Built, DryRun], console: Console) -> None:
    from envkit.app.build import Built

    if not isinstance(outcome, Built):
        console.print("dry run: preflight passed; nothing was built")
        return
    built = outcome
    t = Table(title="envkit build", title_justify="left", header_style="bold")
    t.add_column("")
    t.add_column("", overflow="fold")
    _row(t, "image", f"{built.image}  ({built.image_id})")
    _row(t, "size", f"{built.size / 2**20:.0f} MiB")
    _row(t, "network", "none (offline)" if built.offline else "site mirrors")
    _row(t, "time", f"{built.seconds:.1f} s, {built.steps} steps")
    for name, secs in built.stages:
        _row(t, f"  stage {name}", f"{secs:.1f} s")
    if built.exported is not None:
        folder, wheels = built.exported
        _row(t, "exported wheels", _e(folder) + " (SHA256SUMS)")
        for w in wheels:
            _row(t, f"  {_e(w.file)}", f"{w.bytes / 2**20:.1f} MiB  sha256 {w.sha256}")
    if built.left:
        _row(t, "left on the engine", f"{built.left_bytes / 2**30:.2f} GiB in {len(built.left)} untagged stage image(s), the next build's "
             "layer cache: docker image prune removes them")
        for stage, image_id, size in built.left:
            _row(t, f"  stage {stage}", f"{image_id}  {size / 2**20:.0f} MiB")
    console.print(t)


def print_selftest(doc: dict, image: Optional[str], console: Optional[Console] = None) -> None:
    c = console or _console()
    t = Table(title=_e(f"envkit selftest{' in ' + image if image else ''}"), title_justify="left", header_style="bold")
    t.add_column("check")
    t.add_column("result")
    t.add_column("detail", overflow="fold")
    for ch in doc["checks"]:
        _row(t, ch["name"], _ok(ch["ok"]), ch["detail"])
    d = doc.get("decode")
    if d:
        runs = (f", median of {d['runs']} runs ({d['tokens_per_s_min']}-{d['tokens_per_s_max']}), {d['threads']} thread(s)"
                + (f", load {d['load_1min']}" if d.get("load_1min") is not None else "")) if d.get("runs") else ""
        _row(t, "built-in decoder tokens/s", f"{d['tokens_per_s']}",
             f"{d.get('metric', 'new tokens / total time')}; {d['model']}, batch 1, "
             f"{d['prompt_len']} prompt + {d['new_tokens']} new tokens{runs}; a smoke figure, not a speed verdict")  # not "tiny"'s (D4)
        _row(t, "TTFT / TPOT", f"{d['ttft_ms']} / {d['tpot_ms']} ms", f"on {doc.get('device')}")
    c.print(t)
    if doc.get("models"):
        m = Table(title="batch-1 decode (transformers)", title_justify="left", header_style="bold")
        for col in ("model", "engine", "weights GB", "tokens/s (1/TPOT)", "min-max (runs)", "chars/s", "TTFT ms", "TPOT ms",
                    "% of roofline"):
            m.add_column(col, justify="left" if col in ("model", "engine") else "right")
        for r in doc["models"]:
            roof = f"{r['pct_of_roofline']} % of {r['roofline_tokens_per_s']}" if r.get("roofline_tokens_per_s") else "-"
            spread = f"{r['tokens_per_s_min']}-{r['tokens_per_s_max']} ({r['runs']})" if r.get("runs") and "tokens_per_s_min" in r else "-"
            _row(m, r["shape"], r["engine"], str(r["weights_gb"]), str(r["tokens_per_s"]), spread, str(r.get("chars_per_s", "-")),
                 str(r["ttft_ms"]), str(r["tpot_ms"]), roof)
        c.print(m)
    if doc.get("lambada"):
        la = Table(title="LAMBADA last-word accuracy", title_justify="left", header_style="bold")
        for col in ("model", "engine", "examples", "accuracy", "seconds"):
            la.add_column(col, justify="left" if col in ("model", "engine") else "right")
        for r in doc["lambada"]:
            _row(la, r["model"], r["engine"], str(r["examples"]), f"{r['accuracy']:.1%}", str(r["seconds"]))
        c.print(la)


def print_doctor(host, findings, image: Optional[str], console: Optional[Console] = None, environments: tuple = ()) -> None:
    c = console or _console()
    _print_doctor_host(c, host, findings, image)
    if environments:
        t = Table(title="the host's other environments, each judged on its own", title_justify="left", header_style="bold")
        for col in ("environment", "found as", "stack", "verdict"):
            t.add_column(col, overflow="fold")
        for e in environments:
            worst = [f for f in e.findings if f.severity in ("error", "warning")]
            verdict = (Text(f"probe failed: {e.error}", style=RULE_STYLE) if e.error else
                       Text("; ".join(f"{f.severity} {f.rule}: {f.seen}" for f in worst), style=RULE_STYLE if not e.ok else "yellow")
                       if worst else Text("healthy", style="green"))
            _row(t, e.name, e.why, e.stack or "-", verdict)
        c.print(t)


def _print_doctor_host(c: Console, host, findings, image: Optional[str]) -> None:
    gpus = ", ".join(f"{g.name}" + (f" (sm_{g.cc.replace('.', '')})" if g.cc else "") for g in host.gpus) or host.dcu_name or "none"
    c.print("[bold]envkit doctor[/bold]" + _e(f"{' for image ' + image if image else ''}: GPUs {gpus}; driver {host.driver or '-'}"
            f" (CUDA {host.cuda_driver or '-'}); nvcc {host.nvcc or '-'}"
            + (f"; python {host.python} ({host.python_path})" if host.python and host.python_path and not image else "")
            + f"; torch {host.torch or '-'}"
            + (f" (CUDA {host.torch_cuda})" if host.torch_cuda else "")
            + (f"; flash-attn {host.flash_attn}" if host.flash_attn else "") + (f"; vLLM {host.vllm}" if host.vllm else "")))
    facts = _host_facts(host)
    if facts:
        t = Table.grid(padding=(0, 2))
        t.add_column(style="dim")
        t.add_column(overflow="fold")
        for label, text in facts:
            _row(t, label, text)
        c.print(t)
    style = {"error": "bold red", "warning": "yellow", "info": "cyan"}
    for sev in ("error", "warning", "info"):
        group = [f for f in findings if f.severity == sev]
        if not group:
            continue
        t = Table(title=f"{sev}s ({len(group)})", title_justify="left", header_style="bold", title_style=style[sev])
        t.add_column("rule")
        t.add_column("seen / why", overflow="fold")
        t.add_column("fix", overflow="fold")
        for f in group:
            _row(t, f.rule, Text.assemble(f.seen, "\n", (f.why, "dim")), Text.assemble(f.fix, "\n", (f.source, "dim")))
        c.print(t)
    if not any(f.severity in ("error", "warning") for f in findings):
        c.print("[green]healthy[/green]: no errors or warnings")


# the CPU features worth a line: the widest vector and matrix units of each family
_SHOWN_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "asimd", "sve", "sve2", "bf16", "i8mm", "sme")


def _library_text(name: str, version: Optional[str], found: tuple) -> Optional[str]:
    """ "cuDNN 9.19.0.56 (pip), also 9.14.0 (ldconfig)": the version a torch process loads first, then the others here."""
    if not version:
        return None
    source = next((s for v, s in found if v == version), None)
    others = [f"{v} ({s})" for v, s in found if v != version]
    return f"{name} {version}" + (f" ({source})" if source else "") + (", also " + ", ".join(others) if others else "")


def _host_facts(host) -> list[tuple[str, str]]:
    """The host beside its GPUs, one short line each where known: OS, CPU and NUMA, build tools, cuDNN and NCCL."""
    rows = []
    system = ", ".join(x for x in (host.os_name, host.glibc and f"glibc {host.glibc}", host.kernel and f"kernel {host.kernel}",
                                   host.machine) if x)
    if system:
        rows.append(("OS", system))
    cpu = [x for x in (host.cpu_model, host.cpu_count and f"{host.cpu_count} CPUs") if x]
    if host.numa_nodes:
        lists = f" ({' | '.join(host.numa_cpus)})" if 1 < len(host.numa_cpus) <= 4 else ""
        cpu.append(f"{host.numa_nodes} NUMA node{'s' if host.numa_nodes > 1 else ''}{lists}")
    flags = [f for f in _SHOWN_CPU_FLAGS if f in host.cpu_flags]
    if cpu:
        rows.append(("CPU", ", ".join(cpu) + (f"; {' '.join(flags)}" if flags else "")))
    if host.compilers:
        rows.append(("build", ", ".join(f"{n} {v}" for n, v in host.compilers)))
    libs = [x for x in (_library_text("cuDNN", host.cudnn, host.cudnn_found), _library_text("NCCL", host.nccl, host.nccl_found)) if x]
    if libs:
        rows.append(("libraries", "; ".join(libs)))
    return rows


def print_inspected(i: Inspected) -> None:
    print_inspect(i.image, i.labels, i.solution.to_json())
    print_doctor(i.host, list(i.findings), i.image)


def print_inspect(image: str, labels: dict, sol: dict, console: Optional[Console] = None) -> None:
    c = console or _console()
    t = Table(title=_e(f"envkit inspect {image}"), title_justify="left", header_style="bold")
    t.add_column("component")
    t.add_column("in the image", overflow="fold")
    _row(t, "stack", labels.get("org.opencontainers.image.description", ""))
    if labels.get("org.opencontainers.image.base.name"):
        _row(t, "base image", labels["org.opencontainers.image.base.name"])
    if labels.get("io.envkit.model.name"):
        _row(t, "served model", f"{labels['io.envkit.model.name']} ({labels.get('io.envkit.model.source', '')}; tree sha256 "
             f"{labels.get('io.envkit.model.sha256', '')})")
    if sol.get("workflow"):  # a container engine's answer (resolve's `engine` document)
        _row(t, "engine", f"{sol['engine']} ({sol['workflow']}, {sol['build']})")
        _row(t, "container", sol["image"])
        if sol.get("gpu"):
            _row(t, "target GPU", f"{sol['gpu']['name']} ({sol['gpu']['arch']})")
        _row(t, "driver", f">= {sol['min_driver']}" if sol.get("min_driver") else "-")
        c.print(t)
        return
    _row(t, "platform", sol.get("platform", ""))
    if sol.get("gpu"):
        _row(t, "target GPU", f"{sol['gpu']['name']} ({sol['gpu']['arch']})")
    if sol.get("toolkit"):
        _row(t, "toolkit", f"{sol['toolkit']['kind']} {sol['toolkit']['version']}")
    _row(t, "python", sol.get("python", ""))
    _row(t, "torch", f"{sol['torch']['pin']} (cxx11abi={sol['torch']['cxx11abi']})")
    if sol.get("flash_attn"):
        _row(t, "flash-attn", f"{sol['flash_attn']['version']} ({sol['flash_attn']['build']})")
    for k in sol.get("kernels", []):
        _row(t, f"kernel {k['name']}", f"{k['module']} for {';'.join(k['arch_list'])}")
    if sol.get("vllm"):
        _row(t, "vllm", sol["vllm"]["version"])
    _row(t, "lock sha256", labels.get("io.envkit.lock.sha256", ""))
    c.print(t)


def print_planned_run(doc: dict, console: Optional[Console] = None) -> None:
    """--dry-run of selftest --image, doctor --image and serve: the container, how the GPUs reach it, and what the run
    will hold the image to."""
    c = console or _console()
    spec, gpu = doc["container"], doc["container"]["gpu"]
    t = Table(title=_e(f"{doc['for']} --dry-run: nothing is run"), title_justify="left", header_style="bold")
    t.add_column("")
    t.add_column("", overflow="fold")
    _row(t, "image", f"{spec['image']} (solution platform: {spec['platform'] or 'no envkit label'})")
    _row(t, "engine", f"{spec['runtime']}, network {spec['network']}")
    if gpu["vendor"] is None:
        _row(t, "GPUs", "none passed" + (f": {gpu['why'][0]}" if gpu["why"] else ""))
    elif gpu["passes"]:
        _row(t, "GPUs", f"{gpu['vendor']}: " + "; ".join(gpu["why"]))
    if gpu["missing"]:
        _row(t, "GPUs missing", gpu["missing"])
    exp = doc.get("expects")
    if exp:
        parts = "; ".join(f"{k} {' '.join(v)}" for k, v in exp["parts"].items())
        _row(t, "must see", f"{exp.get('gpu') or exp['vendor'] + ' GPUs'} ({exp.get('arch') or 'any arch'}); {parts or 'no arch list'}")
    _row(t, "command line", spec["command_line"])
    c.print(t)


def print_serving(doc: dict, console: Optional[Console] = None) -> None:
    c = console or _console()
    t = Table(title=_e(f"envkit serve {doc['image']}"), title_justify="left", header_style="bold")
    t.add_column("")
    t.add_column("", overflow="fold")
    _row(t, "url", f"{doc['url']}  (selftest --engine {doc['engine']})")
    _row(t, "model", f"{doc['model']}  (tree sha256 {doc['model_sha256']})")
    _row(t, "container", f"{doc['container']}, user {doc['user']}, {'GPUs passed' if doc['gpus'] else 'no GPUs'}")
    _row(t, "network", f"{doc['network']} (internal: no route out)")
    _row(t, "healthy after", f"{doc['healthy_after_s']} s")
    _row(t, "state", "stopped and removed" if doc["stopped"] else f"running; stop it with: envkit serve --stop {doc['container']}")
    c.print(t)


def print_running(running: Any, as_json: bool) -> None:
    """`envkit serve`'s outcome: the serving table (and its sweep's) for people, on stderr under --json."""
    from envkit.ui import output

    c = _console(stderr=as_json)
    print_serving(running.to_json(), c)
    if running.sweep is not None:
        print_sweep(running.sweep, c)
    if as_json:
        output.print_json(running.to_json())


def print_sweep(doc: dict, console: Optional[Console] = None) -> None:
    """The sweep's table, then each distinct failure in full. The model, URL and errors came from a server or a file:
    their control characters are escaped (model/redact.py's printable), their markup shown as written."""
    c = console or _console()
    from envkit.ui.plot import sweep_title

    t = Table(title=_e(printable(f"serving sweep: {sweep_title(doc)}")), title_justify="left", header_style="bold", pad_edge=False)
    def ms(v) -> str:
        return "-" if v is None else f"{v:.1f}"

    rows = [[str(lv["concurrency"]), str(lv["requests"]), str(lv["failed"]), f"{lv['request_throughput']:.2f}",
             f"{lv['input_throughput']:.0f}", f"{lv['output_throughput']:.0f}", ms(lv["mean_ttft_ms"]), ms(lv.get("median_ttft_ms")),
             ms(lv["p99_ttft_ms"]), ms(lv["mean_tpot_ms"]), ms(lv.get("median_tpot_ms")), ms(lv["p99_tpot_ms"])] for lv in doc["levels"]]
    for i, col in enumerate(("concurrency", "reqs", "fail", "req/s", "in tok/s", "out tok/s", "TTFT ms", "median TTFT", "P99 TTFT",
                             "TPOT ms", "median TPOT", "P99 TPOT")):
        t.add_column(col, justify="right", min_width=max(len(r[i]) for r in rows))  # headers wrap, figures never do
    for row in rows:
        _row(t, *row)
    c.print(t)
    few = sorted({lv.get("completed", 0) for lv in doc["levels"] if 1 < lv.get("completed", 0) < 100})
    if few:
        c.print(Text(f"P99 of {' or '.join(map(str, few))} completed requests lies between the two slowest (linear interpolation, "
                     "numpy's and vLLM's); send 100 or more per level (--num-prompts) for a tail figure"), overflow="fold")
    # Each distinct failure in full under the table, wrapped at words, with the levels that met it: a note column
    # squeezed to 5 characters spelled errors vertically at 80 columns (newcomer review D3).
    errors: dict[str, list[str]] = {}
    for lv in doc["levels"]:
        if lv["failed"]:
            for e in lv.get("errors") or ["failed"]:
                errors.setdefault(str(e), []).append(str(lv["concurrency"]))
    for err, levels in errors.items():
        c.print(Text(printable(f"failed at concurrency {', '.join(levels)}: {err}"), style="red"), overflow="fold")


def print_matrix_check(c: Checked) -> None:
    inferred = c.inferred
    sys.stdout.write(f"{c.matrix.path}: valid; " + ", ".join(f"{v} {k}" for k, v in c.rows.items())
                     + f"; {inferred['total']} facts inferred, {len(inferred['can_name_artifact'])} of them could name an artifact\n")
    for kind, n in sorted(inferred["kinds"].items()):
        sys.stdout.write(f"  inferred: {n} x {kind}\n")
    for name in inferred["can_name_artifact"]:
        sys.stdout.write(f"  could name an artifact on an inferred fact: {name}\n")
    if c.derived:
        sys.stdout.write(f"  kept by hand: {', '.join(c.hand_kept)}\n  derived (envkit matrix refresh): {', '.join(c.derived)}"
                         + ("; each region matches what data/sources derives" if c.derived_checked else "") + "\n")


def print_refresh(r: Refreshed) -> None:
    if r.rewritten:
        sys.stdout.write("; ".join(f"{name}: {n} row(s) rewritten" for name, n, _d in r.differs) + f" in {r.path}\n")
        return
    for _name, _n, d in r.differs:
        sys.stdout.write(d)
    sys.stdout.write(f"{r.path}: " + ("derived regions match data/sources (" + ", ".join(r.regions) + ")\n" if not r.differs else
                     "; ".join(f"{name}: {n} row(s) differ from the sources" for name, n, _d in r.differs)
                     + " (run `envkit matrix refresh` to rewrite them, or correct the extract)\n"))


def print_export_unsolved(outcome: Any) -> None:
    """`matrix export` refused: each target without a solution, then the one line that nothing was written."""
    import sys

    for line in outcome.lines():
        sys.stderr.write(f"envkit: {line}\n")
    sys.stderr.write(f"envkit: nothing exported: {len(outcome.unsolved)} target(s) without a solution "
                     f"(envkit resolve with a target's flags shows why)\n")


def print_rejected(c: Any) -> None:
    """`matrix check` found problems: the headline, then each problem on its own line."""
    import sys

    sys.stderr.write(f"envkit: error: {c.headline}\n" + "".join(f"  {line}\n" for line in c.lines))


def matrix_document(m: Any, table: Optional[str]) -> dict:
    """`matrix show --json`: the tables as shown, each with its title, columns and rows."""
    return {"schema": 1, "matrix": m.path, "tables": {name: {"title": title, "columns": list(columns), "rows": [list(r) for r in rows]}
                                                      for name, (title, columns, rows) in matrix_tables(m, table).items()}}
