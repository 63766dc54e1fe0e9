"""Issue 18: a serving image's model directory read once (every file hashed, one tree digest a site can recompute
with sha256sum) and carried into the build context readable by the server's non-root user."""
from __future__ import annotations

import hashlib

import pytest

from envkit.adapters.model_dir import LISTING, place_model, read_model
from envkit.app.serving import ServeRequest, prepare
from envkit.errors import InputError


def _model(tmp_path):
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "llama"}')
    (d / "model.safetensors").write_bytes(b"\0" * 1000)
    (d / "model.safetensors").chmod(0o600)  # as save_pretrained leaves it
    (d / "sub").mkdir()
    (d / "sub" / "tokenizer.json").write_text("{}")
    return d


def test_the_tree_digest_is_the_sha256_of_its_sha256sums_listing(tmp_path):
    tree = read_model(str(_model(tmp_path)), lambda _: None)
    assert [rel for rel, _, _ in tree.files] == ["config.json", "model.safetensors", "sub/tokenizer.json"]
    assert tree.listing.splitlines()[1] == f"{hashlib.sha256(bytes(1000)).hexdigest()}  model.safetensors"
    assert tree.sha256 == hashlib.sha256(tree.listing.encode()).hexdigest() and tree.bytes == 1000 + 23 + 2


def test_placing_the_model_makes_every_file_readable_and_leaves_the_source_alone(tmp_path):
    src = _model(tmp_path)
    tree = read_model(str(src), lambda _: None)
    dest = tmp_path / "ctx" / "model"
    place_model(tree, dest, lambda _: None)
    assert (dest / "model.safetensors").stat().st_mode & 0o777 == 0o644  # copied: the server runs as non-root
    assert (src / "model.safetensors").stat().st_mode & 0o777 == 0o600  # the user's file keeps its mode
    assert (dest / LISTING).read_text() == tree.listing
    (dest / "stale.bin").write_bytes(b"old")
    place_model(tree, dest, lambda _: None)
    assert not (dest / "stale.bin").exists()


@pytest.mark.parametrize("what, says", [("missing", "no such directory"), ("no-config", "no config.json")])
def test_a_directory_that_is_not_a_model_is_refused_in_one_line(tmp_path, what, says):
    path = tmp_path / "m"
    if what == "no-config":
        path.mkdir()
        (path / "weights.bin").write_bytes(b"x")
    with pytest.raises(InputError) as exc:
        prepare(ServeRequest(str(path)), lambda _: None)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_the_served_name_defaults_to_the_directory_and_must_be_sendable(tmp_path):
    src = _model(tmp_path)
    assert prepare(ServeRequest(str(src)), lambda _: None).serve.name == "tiny"
    with pytest.raises(InputError, match="is not a name clients can send"):
        prepare(ServeRequest(str(src), name="bad name"), lambda _: None)


def test_a_hub_name_is_refused_with_the_download_to_do_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as exc:
        prepare(ServeRequest("Qwen/Qwen-7B-Chat"), lambda _: None)
    assert "does not download from a hub" in str(exc.value) and "huggingface-cli download Qwen/Qwen-7B-Chat" in exc.value.fix


def test_a_project_target_carries_its_serving_keys_and_refuses_them_without_serve(tmp_path):
    from envkit.config import project_file

    f = tmp_path / "envkit.toml"
    f.write_text('[[target]]\nname = "tiny"\nplatform = "cpu"\nvllm = "0.32.0"\noffline = true\nserve = "models/tiny"\n'
                 'served_model_name = "tiny"\nserve_args = ["--dtype=float32"]\n')
    t = project_file.load(str(f)).target("tiny")
    assert t.serve is not None and t.serve.model == str(tmp_path / "models/tiny")
    assert (t.serve.name, t.serve.args, t.serve.mount) == ("tiny", ("--dtype=float32",), False)
    f.write_text('[[target]]\nname = "tiny"\nplatform = "cpu"\noffline = true\nserve_args = ["--dtype=float32"]\n')
    with pytest.raises(InputError, match="go with serve"):
        project_file.load(str(f))


@pytest.mark.parametrize("ref, parts", [
    ("envkit/cpu:default", ("envkit/cpu", "default")),
    ("127.0.0.1:5000/envkit/tiny:v1", ("127.0.0.1:5000/envkit/tiny", "v1")),
    ("127.0.0.1:5000/envkit/tiny", ("127.0.0.1:5000/envkit/tiny", "latest")),  # the registry's port is not a tag
])
def test_an_image_reference_splits_into_repository_and_tag_one_way_for_tag_push_and_pull(ref, parts):
    from envkit.adapters.engine import split_ref
    from envkit.app.serving import Pushed

    assert split_ref(ref) == parts
    assert Pushed("x", ref, "sha256:" + "b" * 64, None, None).pinned == f"{parts[0]}@sha256:{'b' * 64}"
