"""The command line: parse, call the pure core, render, map errors to exit codes. Nothing else."""
from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from .errors import EnvkitError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Resolve, generate, build and self-test GPU environments for LLM serving.")
matrix_app = typer.Typer(no_args_is_help=True, help="Inspect and validate matrix.toml.")
app.add_typer(matrix_app, name="matrix")

EXIT_NO_SOLUTION = 1


def _print_json(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")


@app.command()
def resolve(
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU product name (\"RTX 4090\", H100, Z100L) or arch (sm_86, gfx942)"),
    driver: Optional[str] = typer.Option(None, "--driver", help="NVIDIA driver version, e.g. 535.104.05"),
    platform: Optional[str] = typer.Option(None, "--platform", help="cuda, rocm, dtk or cpu"),
    cuda: Optional[str] = typer.Option(None, "--cuda", help="CUDA toolkit X.Y"),
    rocm: Optional[str] = typer.Option(None, "--rocm", help="ROCm X.Y"),
    dtk: Optional[str] = typer.Option(None, "--dtk", help="Hygon DTK YY.MM"),
    python: Optional[str] = typer.Option(None, "--python", help="Python X.Y"),
    torch: Optional[str] = typer.Option(None, "--torch", help="torch version or specifier; may carry +cu118"),
    flash_attn: Optional[str] = typer.Option(None, "--flash-attn", help="flash-attn version or specifier (2 means 2.*)"),
    vllm: Optional[str] = typer.Option(None, "--vllm", help="vLLM version or specifier"),
    kernels: Optional[str] = typer.Option(None, "--kernels", help="flash-attn csrc kernels to build: layer_norm,rotary"),
    as_json: bool = typer.Option(False, "--json", help="print one stable JSON document"),
    matrix_path: Optional[str] = typer.Option(None, "--matrix", help="another matrix.toml (default: the built-in one)"),
) -> None:
    """Solve the compatibility matrix: the newest consistent stack, or every conflict with its fix."""
    from . import matrix as mx
    from .resolve import parse_query, resolve as solve

    m = mx.load(matrix_path)
    q = parse_query(m, gpu=gpu, driver=driver, platform=platform, cuda=cuda, rocm=rocm, dtk=dtk,
                    python=python, torch=torch, flash_attn=flash_attn, vllm=vllm, kernels=kernels)
    result = solve(m, q)
    if as_json:
        _print_json(result.to_dict())
    else:
        from .report import print_result

        print_result(result)
    if not result.ok:
        raise typer.Exit(EXIT_NO_SOLUTION)


@matrix_app.command("check")
def matrix_check(
    path: Optional[str] = typer.Argument(None, help="matrix.toml to check (default: the built-in one)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Validate the matrix: every bad row is reported with its line."""
    from . import matrix as mx

    m = mx.load(path)
    counts = {"cuda": len(m.cuda), "gpu": len(m.gpus), "torch": len(m.torch), "rocm": len(m.rocm), "dtk": len(m.dtk),
              "flash_attn": len(m.flash_attn), "vllm": len(m.vllm), "python": len(m.python)}
    inferred = sum(1 for b in m.torch if b.confidence == "inferred") + sum(1 for f in m.flash_attn if f.confidence == "inferred") \
        + sum(1 for v in m.vllm if v.confidence == "inferred")
    if as_json:
        _print_json({"schema": 1, "ok": True, "path": m.path, "rows": counts, "inferred": inferred})
        return
    sys.stdout.write(f"{m.path}: valid; " + ", ".join(f"{v} {k}" for k, v in counts.items())
                     + f"; {inferred} entries marked inferred\n")


@matrix_app.command("show")
def matrix_show(
    table: Optional[str] = typer.Argument(None, help="cuda, gpu, torch, rocm, dtk, flash_attn, vllm, python"),
    matrix_path: Optional[str] = typer.Option(None, "--matrix"),
) -> None:
    """Print the matrix (or one table) as rich tables."""
    from . import matrix as mx
    from .report import print_matrix

    print_matrix(mx.load(matrix_path), table)


def main() -> None:
    try:
        rv = app(standalone_mode=False)
    except EnvkitError as exc:
        sys.stderr.write(f"envkit: error: {exc.one_line()}\n")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("envkit: interrupted\n")
        sys.exit(130)
    except Exception as exc:  # click's usage errors carry their own exit code and message
        show = getattr(exc, "show", None)
        code = getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            sys.exit(code)
        raise
    sys.exit(rv if isinstance(rv, int) else 0)
