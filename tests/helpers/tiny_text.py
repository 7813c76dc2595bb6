"""A tiny text model built in the test: a word-level tokenizer (tokenizers library) and an ONNX mean-pooling embedder.

The embedder is what a sentence-embedding model computes at its ends: token embeddings gathered from a table, a
mean over the real tokens (the attention mask), L2 normalisation. Padding a row with [PAD] tokens (mask 0) leaves
its embedding unchanged, so a padded batch must answer what each sentence alone does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from tests.helpers.corpus import save_graph

WORDS = "the a cat dog sat on mat ran fast slow red blue green model server batch queue token text long short".split()
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
DIM = 8


def tiny_tokenizer(path: Path, max_length: int = 12) -> Path:
    """tokenizer.json: lower-cased, split on whitespace and punctuation, one id per known word ([UNK] else), with
    [CLS] ... [SEP] around each row and fixed padding to ``max_length`` in the file (as real tokenizer.json files
    often have: the endpoint must pad to the batch's longest row instead)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    vocab = {w: i for i, w in enumerate([*SPECIALS, *WORDS])}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()])
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.enable_padding(pad_id=0, pad_token="[PAD]", length=max_length)
    tok.enable_truncation(max_length)
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def tiny_text_onnx(path: Path, seed: int = 0, masked: bool = True) -> Path:
    """input_ids, attention_mask (int64 [batch, sequence]) -> embedding (float32 [batch, DIM]): masked mean, L2-normalised.

    ``masked=False``: the mean takes every position, padding too (a model whose answer a padded batch changes)."""
    table = np.random.default_rng(seed).standard_normal((len(SPECIALS) + len(WORDS), DIM)).astype(np.float32)
    unmasked = [
        helper.make_node("Gather", ["table", "input_ids"], ["tokens"]),
        helper.make_node("ReduceMean", ["tokens"], ["mean"], axes=[1], keepdims=0),  # opset 17: axes is an attribute
        helper.make_node("Identity", ["attention_mask"], ["unused"]),
        helper.make_node("LpNormalization", ["mean"], ["embedding"], axis=1, p=2),
    ]
    nodes = (
        unmasked
        if not masked
        else [
            helper.make_node("Gather", ["table", "input_ids"], ["tokens"]),  # [B, L, D]
            helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["maskf", "last"], ["mask3"]),  # [B, L, 1]
            helper.make_node("Mul", ["tokens", "mask3"], ["masked"]),
            helper.make_node("ReduceSum", ["masked", "one"], ["summed"], keepdims=0),  # [B, D]
            helper.make_node("ReduceSum", ["mask3", "one"], ["count"], keepdims=0),  # [B, 1]
            helper.make_node("Max", ["count", "tiny"], ["safe"]),
            helper.make_node("Div", ["summed", "safe"], ["mean"]),
            helper.make_node("LpNormalization", ["mean"], ["embedding"], axis=1, p=2),
        ]
    )
    graph = helper.make_graph(
        nodes,
        "tinytext",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"]) for n in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", DIM])],
        initializer=[
            helper.make_tensor("table", TensorProto.FLOAT, list(table.shape), table.ravel()),
            helper.make_tensor("last", TensorProto.INT64, [1], [-1]),
            helper.make_tensor("one", TensorProto.INT64, [1], [1]),
            helper.make_tensor("tiny", TensorProto.FLOAT, [], [1e-9]),
        ],
    )
    return save_graph(graph, path, opset=17)


def text_model_overrides(where: Path, max_length: int = 12) -> list[str]:
    """Write the tiny text model (tinytext.onnx) and its tokenizer under ``where``; the overrides that configure them."""
    onnx_path, tok = tiny_text_onnx(where / "tinytext.onnx"), tiny_tokenizer(where / "tok" / "tokenizer.json", max_length)
    return [
        "model=onnx",
        "model.name=tinytext",
        f"model.path={onnx_path}",
        "+model/tokenizer=schema",
        f"model.tokenizer.path={tok}",
        "+model.tokenizer.inputs.input_ids=ids",
        "+model.tokenizer.inputs.attention_mask=attention_mask",
        f"model.tokenizer.max_length={max_length}",
    ]


def reference(onnx_path: Path, tokenizer_path: Path, sentences: list[str], max_length: int) -> np.ndarray:
    """Each sentence alone, in process: the tokenizer (cut at ``max_length``, no padding) and ONNX Runtime."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    tok.no_padding()
    tok.enable_truncation(max_length)
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    rows = []
    for s in sentences:
        e = tok.encode(s)
        feed = {"input_ids": np.array([e.ids], np.int64), "attention_mask": np.array([e.attention_mask], np.int64)}
        rows.append(sess.run(["embedding"], feed)[0][0])
    return np.stack(rows)


def release_text_repository(store: object, cfg: object, where: Path, git_cwd: Path, models: tuple[str, ...] = ("tinytext", "tinytext_text")) -> None:
    """Write the repository stage's output for the tiny text model's ``cfg`` under ``where`` (a new folder) and release
    ``models`` of it into ``store``, with a parity report that vouches for its ONNX file and tokenizer."""
    import json

    from pipeline.core.atomic import file_digest
    from pipeline.records.parity import TextParity
    from pipeline.release.build import BuildInputs, build_release
    from pipeline.repository.writer import write_repository
    from tests.helpers.release_repo import dvc_lock, parity_report

    repo = where / "repo"
    repo.mkdir(parents=True)
    write_repository(cfg, Path(str(cfg.model.path)), repo)  # type: ignore[attr-defined]
    parity = parity_report(where / "parity.json", onnx=repo / "tinytext" / "1" / "model.onnx", model="tinytext")
    report = json.loads(parity.read_text())
    report["text_endpoint"] = TextParity(file_digest(repo / "tinytext_text" / "1" / "tokenizer.json")[0], True, 0.0, 1e-4, 7).to_json()
    parity.write_text(json.dumps(report))
    inputs = BuildInputs(repo, parity, None, dvc_lock(where / "dvc.lock"), git_cwd=git_cwd)
    for model in models:
        build_release(store, inputs, model=model, unchecked_evidence=True, tag=False)  # type: ignore[arg-type]
