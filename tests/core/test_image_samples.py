"""A folder of images as real samples (issue 28, item A): ``model.data: {path: <folder>, mean: [...], std: [...]}``.

Rows, shapes, NCHW/NHWC layout, grayscale, normalization, sizes from ``model.sample_dims``, a fixed batch; every bad
input is one ConfigError naming the file or key and the fix; the keys are checked at composition; the probe
fingerprints the images by content; the calibrate stage reads a folder for a conv ONNX given as ``model=onnx``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline.core.config import ModelConfig, TensorSpec
from pipeline.core.config.rules import check_data
from pipeline.core.config.problems import Problems
from pipeline.core.errors import ConfigError
from pipeline.core.images import load_folder
from pipeline.core.samples import load_samples
from pipeline.core.sources import data_record

RED, GREEN, BLUE = (255, 0, 0), (0, 255, 0), (0, 0, 255)


def solid(path: Path, color: tuple[int, int, int], size: tuple[int, int] = (20, 12)) -> Path:
    """A one-colour PNG (``size`` is Pillow's (W, H)): every pixel of its rows is known without resampling doubts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path


def spec(shape: list, dtype: str = "float32", name: str = "x") -> TensorSpec:
    return TensorSpec(name=name, dtype=dtype, shape=shape)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Three images of different sizes, written out of name order, and a labels file that is no sample."""
    d = tmp_path / "images"
    solid(d / "c.png", BLUE, (7, 31))
    solid(d / "a.png", RED, (20, 12))
    solid(d / "b.jpg", GREEN, (16, 16))
    (d / "labels.csv").write_text("a.png,cat\n")
    return d


def test_nchw_rows_are_sorted_by_name_resized_and_scaled(folder: Path) -> None:
    [feed] = load_folder(folder, [spec(["N", 3, 8, 10])], {})
    x = feed["x"]
    assert x.shape == (3, 3, 8, 10) and x.dtype == np.float32 and x.flags.c_contiguous
    assert 0.0 <= x.min() and x.max() <= 1.0
    np.testing.assert_allclose(x[0].mean(axis=(1, 2)), [1, 0, 0], atol=1e-6)  # a.png: red, first by name
    np.testing.assert_allclose(x[1].mean(axis=(1, 2)), [0, 1, 0], atol=0.02)  # b.jpg: green (JPEG is lossy)
    np.testing.assert_allclose(x[2].mean(axis=(1, 2)), [0, 0, 1], atol=1e-6)  # c.png: blue


def test_nhwc_is_chosen_by_the_axis_of_size_3(folder: Path) -> None:
    [feed] = load_folder(folder, [spec(["N", 8, 10, 3])], {})
    assert feed["x"].shape == (3, 8, 10, 3)
    np.testing.assert_allclose(feed["x"][0].mean(axis=(0, 1)), [1, 0, 0], atol=1e-6)


def test_one_channel_input_reads_grayscale(folder: Path) -> None:
    [feed] = load_folder(folder, [spec(["N", 1, 4, 4])], {})
    assert feed["x"].shape == (3, 1, 4, 4)
    want = np.asarray(Image.new("RGB", (1, 1), RED).convert("L"), np.float32)[0, 0] / 255  # Pillow's own L of red
    np.testing.assert_allclose(feed["x"][0], want, atol=1e-6)


def test_mean_and_std_normalize_per_channel_one_value_standing_for_all(folder: Path) -> None:
    [feed] = load_folder(folder, [spec(["N", 3, 4, 4])], {}, mean=[0.5], std=[0.5, 0.25, 1.0])
    np.testing.assert_allclose(feed["x"][0].mean(axis=(1, 2)), [1.0, -2.0, -0.5], atol=1e-6)  # red: (1-.5)/.5, (0-.5)/.25, (0-.5)/1
    with pytest.raises(ConfigError, match="model.data.mean has 2 values and the model's images have 3 channel"):
        load_folder(folder, [spec(["N", 3, 4, 4])], {}, mean=[0.5, 0.5])


def test_dynamic_height_and_width_come_from_sample_dims_or_the_error_names_the_keys(folder: Path) -> None:
    [feed] = load_folder(folder, [spec(["N", 3, "H", "W"])], {"H": 6, "W": 9})
    assert feed["x"].shape == (3, 3, 6, 9)
    with pytest.raises(ConfigError) as e:
        load_folder(folder, [spec(["N", 3, "height", "width.0"])], {"height": 6})
    msg = e.value.render()
    assert "no fixed W" in msg and "++model.sample_dims.width_0=224" in msg and "model.sample_dims.height" not in msg, msg
    # A dynamic channel axis: nothing says which axis holds the channels until sample_dims gives it a size.
    with pytest.raises(ConfigError, match="cannot tell how to lay out images") as e:
        load_folder(folder, [spec(["N", "C", 8, 8])], {})
    assert "++model.sample_dims.C=3" in e.value.render()
    assert load_folder(folder, [spec(["N", "C", 8, 8])], {"C": 3})[0]["x"].shape == (3, 3, 8, 8)


def test_a_fixed_batch_gets_feeds_of_that_batch(folder: Path) -> None:
    feeds = load_folder(folder, [spec([1, 3, 4, 4])], {})
    assert [f["x"].shape for f in feeds] == [(1, 3, 4, 4)] * 3
    with pytest.raises(ConfigError, match="has 3 images and input 'x' takes fixed batches of 2") as e:
        load_folder(folder, [spec([2, 3, 4, 4])], {})
    assert "multiple of 2" in e.value.render()


def test_load_samples_reads_a_folder_with_the_input_dtype(folder: Path) -> None:
    model = ModelConfig(data={"path": str(folder), "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]})
    [feed] = load_samples(model, [spec(["batch", 3, 4, 4], dtype="float16", name="image")])
    assert list(feed) == ["image"] and feed["image"].dtype == np.float16 and feed["image"].shape == (3, 3, 4, 4)
    assert feed["image"].min() == -1.0 and feed["image"].max() == 1.0


def test_a_folder_without_images_names_the_folder_and_what_it_holds(tmp_path: Path) -> None:
    d = tmp_path / "empty"
    d.mkdir()
    with pytest.raises(ConfigError, match="is a folder with no images .* it is empty"):
        load_folder(d, [spec(["N", 3, 4, 4])], {})
    (d / "scan.tif").write_bytes(b"II*\0")
    with pytest.raises(ConfigError, match=r"it holds only \.tif files") as e:
        load_folder(d, [spec(["N", 3, 4, 4])], {})
    assert f"put the sample images in {d}" in e.value.render()


@pytest.mark.parametrize("content", [b"not an image at all", None], ids=["garbage", "truncated"])
def test_an_undecodable_image_is_named_with_the_fix(folder: Path, content: bytes | None) -> None:
    bad = folder / "b2.png"
    full = solid(folder / "tmp.png", RED, (64, 64)).read_bytes()
    (folder / "tmp.png").unlink()
    bad.write_bytes(content if content is not None else full[: len(full) // 2])
    with pytest.raises(ConfigError, match="cannot decode .*b2.png") as e:
        load_folder(folder, [spec(["N", 3, 4, 4])], {})
    assert f"replace or remove {bad}" in e.value.render()


@pytest.mark.parametrize(
    "specs",
    [
        [spec(["N", 3, 4, 4]), spec(["N", 3, 4, 4], name="y")],  # two inputs
        [spec(["N", 16])],  # rank 2
        [spec(["N", 3, 4, 4], dtype="int64")],  # not float
    ],
    ids=["two-inputs", "rank-2", "int64"],
)
def test_a_model_that_takes_no_image_batch_is_one_message(folder: Path, specs: list[TensorSpec]) -> None:
    with pytest.raises(ConfigError, match="feeds only a model with one rank-4 float input") as e:
        load_folder(folder, specs, {})
    assert "numpy.savez" in e.value.render() and "model inputs:" in e.value.render()


def test_an_ambiguous_channel_axis_is_refused(folder: Path) -> None:
    with pytest.raises(ConfigError, match="both axis 1 and axis 3 could hold the channels"):
        load_folder(folder, [spec(["N", 3, 8, 3])], {})


def test_the_keys_are_checked() -> None:
    def problems(data: dict) -> dict[str, str]:
        p = Problems()
        check_data(data, p)
        return {i.key: i.message for i in p.items}

    assert problems({"path": "imgs", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}) == {}
    assert problems({"path": "imgs", "mean": None, "std": [0.5]}) == {}
    assert problems({"_target_": "pkg.fn", "anything": 1}) == {}  # a hook's arguments are its own
    got = problems({"path": "imgs", "maen": [0.5], "std": [0.5, 0.0, 1.0]})
    assert "did you mean 'mean'" in got["model.data.maen"] and "> 0" in got["model.data.std"], got
    assert "3 (RGB order) or 1" in problems({"path": "imgs", "mean": [0.5, 0.5]})["model.data.mean"]
    assert "3 (RGB order) or 1" in problems({"path": "imgs", "std": 0.5})["model.data.std"]
    assert "every value must be" in problems({"path": "imgs", "std": ["a"]})["model.data.std"]
    assert "folder of images only" in problems({"path": "rows.npy", "mean": [0.5]})["model.data.mean"]
    assert "must be {_target_" in problems({"mean": [0.5]})["model.data"]


def test_composition_accepts_a_folder_and_refuses_one_without_images(make_params, tmp_path: Path, folder: Path) -> None:
    from pipeline.core.config import load_config
    from tests.helpers.corpus import conv_opset12_onnx

    onnx_path = conv_opset12_onnx(tmp_path / "conv.onnx")
    base = ["model=onnx", f"model.path={onnx_path}", f"+model.data.path={folder}"]
    cfg = load_config(make_params(*base, "+model.data.mean=[0.485,0.456,0.406]", "+model.data.std=[0.229,0.224,0.225]"))
    assert cfg.model.data == {"path": str(folder), "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    (tmp_path / "none").mkdir()
    with pytest.raises(ConfigError, match=r"model.data.path='.*none': a folder with no images"):
        make_params("model=onnx", f"model.path={onnx_path}", f"+model.data.path={tmp_path / 'none'}")


def test_the_probe_fingerprints_the_images_by_content(folder: Path, tmp_path: Path) -> None:
    model = ModelConfig(data={"path": str(folder)})
    rec = data_record(model, tmp_path)
    assert [e["path"] for e in rec["images"]] == ["images/a.png", "images/b.jpg", "images/c.png"]
    again = json.dumps(data_record(model, tmp_path), sort_keys=True)
    (folder / "README.md").write_text("no sample\n")  # what no stage reads changes nothing
    assert json.dumps(data_record(model, tmp_path), sort_keys=True) == again
    solid(folder / "a.png", GREEN, (20, 12))  # an image edited in place, same name and size
    changed = data_record(model, tmp_path)
    assert changed["images"][0]["sha256"] != rec["images"][0]["sha256"] and changed["images"][1:] == rec["images"][1:]
    solid(folder / "sub" / "d.png", RED)  # subfolders are read too
    assert data_record(model, tmp_path)["images"][-1]["path"] == "images/sub/d.png"
    for f in folder.rglob("*.*g"):
        f.unlink()
    with pytest.raises(ConfigError, match="a folder with no images"):
        data_record(model, tmp_path)


def test_the_calibrate_stage_reads_a_folder_for_a_conv_onnx(make_params, tmp_path: Path) -> None:
    """``model=onnx model.data.path=<folder>``: 16 PNGs become 16 rows of x [N, 3, 16, 16], split between the
    calibration set and the rows held out for parity."""
    from polygraphy.json import load_json

    from pipeline.stages import calibrate
    from tests.helpers.corpus import conv_opset12_onnx

    rng = np.random.default_rng(0)
    d = tmp_path / "imgs"
    d.mkdir()
    for i in range(16):
        Image.fromarray((rng.random((20, 24, 3)) * 255).astype(np.uint8)).save(d / f"{i:02d}.png")
    onnx_path = conv_opset12_onnx(tmp_path / "conv.onnx")
    params = make_params("model=onnx", f"model.path={onnx_path}", f"+model.data.path={d}", "+model.data.mean=[0.5]", "+model.data.std=[0.25]")
    out, report = tmp_path / "samples.json", tmp_path / "calibrate.json"
    assert calibrate.main(["--params", str(params), "--onnx", str(onnx_path), "--out", str(out), "--report", str(report)]) == 0
    r = json.loads(report.read_text())
    assert r["real"] and r["rows_available"] == 16 and r["rows"] == 8 and r["split"]["held_out"]["rows"] == 8, r
    assert r["inputs"] == {"x": {"dtype": "float32", "dims": ["N", 3, 16, 16]}}
    [feed] = load_json(str(out))
    want = (np.asarray(Image.open(d / "00.png").convert("RGB").resize((16, 16), Image.Resampling.BILINEAR), np.float32) / 255 - 0.5) / 0.25
    assert feed["x"].shape == (8, 3, 16, 16)
    np.testing.assert_allclose(feed["x"][0], want.transpose(2, 0, 1), atol=1e-5)  # row 0 is calibration (odd rows are held out)
