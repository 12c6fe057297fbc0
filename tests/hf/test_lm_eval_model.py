"""The lm-eval model ``posenc`` (posenc.hf.lm_eval_model) against lm-eval's own ``hf`` model
on three local tasks defined offline (a loglikelihood task, rolling perplexity and a short
generation), run through ``lm_eval.simple_evaluate``: the same numbers and the same generated
text without extension and for YaRN (read by ``hf`` from a saved config), and a region method
that runs and differs from no extension past the original context.

A tiny Llama (native context 64) with a byte-level BPE tokenizer is saved to a temporary
folder; the tasks read JSON lines written beside it (no hub, no download).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
lm_eval = pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from posenc.errors import UserError  # noqa: E402
from posenc.hf import extend, load_model, save_extended  # noqa: E402
from posenc.hf.lm_eval_model import PosencLM  # noqa: E402
from posenc.methods import list_methods, method_class  # noqa: E402
from tests.hf.helpers import save_tiny_model  # noqa: E402

NATIVE = 64                                 # the tiny model's context, in tokens
TASKS = ("tiny_ll", "tiny_ppl", "tiny_gen")
#: the metrics compared per task
METRICS = {"tiny_ll": ("perplexity", "acc"),
           "tiny_ppl": ("word_perplexity", "byte_perplexity", "bits_per_byte"),
           "tiny_gen": ("exact_match",)}

_TASK_YAML = {
    "tiny_ll": """
output_type: loglikelihood
doc_to_text: "{{context}}"
doc_to_target: "{{continuation}}"
target_delimiter: ""
metric_list:
  - metric: perplexity
  - metric: acc
""",
    "tiny_ppl": """
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{text}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
""",
    "tiny_gen": """
output_type: generate_until
doc_to_text: "{{prompt}}"
doc_to_target: "{{answer}}"
target_delimiter: ""
generation_kwargs:
  until: ["\\n\\n"]
  max_gen_toks: 6
  do_sample: false
metric_list:
  - metric: exact_match
""",
}


def _write_tasks(root: Path, text: str) -> Path:
    """Three tasks in ``root/tasks``: contexts of about 350 characters (past the native 64
    tokens), documents of 1200 characters for rolling perplexity, prompts to continue."""
    data = {
        "tiny_ll": [{"context": text[i:i + 350], "continuation": text[i + 350:i + 380]}
                    for i in range(0, 2400, 400)],
        "tiny_ppl": [{"text": text[i:i + 1200]} for i in range(0, 3600, 1200)],
        "tiny_gen": [{"prompt": text[i:i + 250], "answer": text[i + 250:i + 260]}
                     for i in range(0, 1500, 300)],
    }
    folder = root / "tasks"
    folder.mkdir()
    for task, rows in data.items():
        (folder / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (folder / f"{task}.yaml").write_text(
            f"task: {task}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
            f"    test: {folder / (task + '.jsonl')}\n  cache_dir: {root / 'datasets'}\n"
            f"test_split: test\n{_TASK_YAML[task]}metadata:\n  version: 1.0\n")
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(model folder, the same model saved with YaRN x4 in its config, task folder)."""
    root = tmp_path_factory.mktemp("lm_eval")
    model = save_tiny_model(root / "tiny", native=NATIVE)
    loaded = load_model(str(model))
    extend(loaded.model, "yarn", 4.0)
    yarn = save_extended(loaded.model, root / "tiny-yarn", loaded.tokenizer)
    return model, yarn, _write_tasks(root, (root / "data.txt").read_text())


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    """No hub: the offline switches as the environment and as the loaded modules read them."""
    import datasets
    import huggingface_hub
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def evaluate(model: str, model_args: str, tasks_dir: Path, tasks=TASKS, batch_size=1):
    return lm_eval.simple_evaluate(
        model=model, model_args=model_args, tasks=list(tasks), device="cpu",
        batch_size=batch_size, bootstrap_iters=0, log_samples=True,
        task_manager=TaskManager(include_path=str(tasks_dir), include_defaults=False))


def numbers(out: dict, tasks=TASKS) -> dict[str, float]:
    """``task/metric`` -> value for the metrics of :data:`METRICS`."""
    return {f"{t}/{m}": out["results"][t][f"{m},none"] for t in tasks for m in METRICS[t]}


def generations(out: dict) -> list[str]:
    return [s["resps"][0][0] for s in out["samples"]["tiny_gen"]]


@pytest.mark.parametrize("posenc_args,hf_model", [
    ("", "tiny"),                                 # no extension
    (",method=yarn,factor=4", "yarn"),           # transformers' YaRN from the saved config
])
def test_posenc_gives_the_numbers_and_text_of_lm_evals_hf_model(tiny, posenc_args, hf_model):
    model, yarn, tasks = tiny
    ours = evaluate("posenc", f"pretrained={model}{posenc_args}", tasks)
    theirs = evaluate("hf", f"pretrained={model if hf_model == 'tiny' else yarn},"
                            "dtype=float32", tasks)
    mine, ref = numbers(ours), numbers(theirs)
    assert mine == ref                  # the same forward passes: equal to the last bit
    assert all(math.isfinite(v) for v in mine.values())
    assert mine["tiny_ppl/word_perplexity"] > 1
    assert generations(ours) == generations(theirs)
    assert any(g.strip() for g in generations(ours))       # something was generated
    assert ours["config"]["posenc_extension"]["method"] == ("yarn" if posenc_args else "none")


def test_yarn_differs_from_none_on_the_same_tasks(tiny):
    """The comparison above can fail: YaRN changes the numbers."""
    model, _, tasks = tiny
    none = numbers(evaluate("posenc", f"pretrained={model}", tasks, ("tiny_ll",)),
                   ("tiny_ll",))
    yarn = numbers(evaluate("posenc", f"pretrained={model},method=yarn,factor=4", tasks,
                            ("tiny_ll",)), ("tiny_ll",))
    assert none["tiny_ll/perplexity"] != pytest.approx(yarn["tiny_ll/perplexity"], rel=1e-3)


def test_self_extend_runs_and_differs_from_none_past_the_original_context(tiny):
    """Both read the same 256-token windows (past the native 64); Self-Extend's grouped
    positions change every number; its generation batches run one request at a time, so a
    batch of 2 gives the text of a batch of 1."""
    model, _, tasks = tiny
    none = evaluate("posenc", f"pretrained={model},max_length=256", tasks)
    se = evaluate("posenc", f"pretrained={model},method=self_extend,factor=4", tasks,
                  batch_size=2)
    se_one = evaluate("posenc", f"pretrained={model},method=self_extend,factor=4", tasks,
                      ("tiny_gen",))
    ours, ref = numbers(se), numbers(none)
    assert all(math.isfinite(v) for v in ours.values())
    for key in ("tiny_ll/perplexity", "tiny_ppl/word_perplexity", "tiny_ppl/bits_per_byte"):
        assert ours[key] != pytest.approx(ref[key], rel=1e-3), key
    assert generations(se) == generations(se_one)
    assert se["config"]["posenc_extension"]["attention"]["name"] == "self_extend"


def _requests(text: str) -> dict[str, list[Instance]]:
    return {"loglikelihood": [Instance("loglikelihood", {}, (text[:300], text[300:330]), 0)],
            "loglikelihood_rolling": [Instance("loglikelihood_rolling", {}, (text[:900],), 0)],
            "generate_until": [Instance("generate_until", {},
                                        (text[:200], {"until": ["\n\n"], "max_gen_toks": 3}),
                                        0)]}


@pytest.mark.parametrize("method", list_methods())
def test_every_registered_method_scores_rolls_and_generates(tiny, method):
    model, _, tasks = tiny
    cls = method_class(method)
    factor = 4 if cls.factor_rule != "none" and cls.reads_factor else None
    options = {"long_factor": [4.0] * 8, "short_factor": [1.0] * 8} \
        if method == "longrope" else {}                  # head_dim / 2 = 8 factors each
    lm = PosencLM(pretrained=str(model), method=method, factor=factor, device="cpu",
                  **options)
    text = (tasks / "tiny_ppl.jsonl").read_text()
    reqs = _requests(json.loads(text.splitlines()[0])["text"])
    (ll, _), = lm.loglikelihood(reqs["loglikelihood"], disable_tqdm=True)
    rolled, = lm.loglikelihood_rolling(reqs["loglikelihood_rolling"], disable_tqdm=True)
    generated, = lm.generate_until(reqs["generate_until"], disable_tqdm=True)
    assert math.isfinite(ll) and ll < 0 and math.isfinite(rolled) and rolled < ll
    assert isinstance(generated, str)
    assert lm.extension.method == ("none" if method == "logn" else method)
    assert lm.max_length == lm.extension.context_length


def test_method_options_and_addons_come_from_model_args(tiny):
    model, _, _ = tiny
    lm = PosencLM.create_from_arg_string(
        f"pretrained={model},method=self_extend,factor=4,window=16,group=4,device=cpu")
    assert (lm.extension.attention["window"], lm.extension.attention["group"]) == (16, 4)
    assert lm.one_at_a_time
    lm = PosencLM.create_from_arg_string(f"pretrained={model},method=yarn:2+logn,device=cpu")
    assert (lm.extension.factor, lm.extension.logn, lm.one_at_a_time) == (2.0, True, False)
    assert lm.max_length == 2 * NATIVE
    lm = PosencLM.create_from_arg_string(f"pretrained={model},method=none,device=cpu")
    assert lm.extension.method == "none" and lm.max_length == NATIVE


@pytest.mark.parametrize("args,message", [
    ("method=yarm,factor=4", "unknown method 'yarm'"),
    ("method=self_extend,window=16,group=4,colour=red", "unknown model_args colour"),
    ("method=self_extend,peft=adapter", "loads the model and its tokenizer itself"),
    ("method=linear", "needs a factor"),
    ("dtype=auto", "dtype must be one of"),
    ("device=nowhere", "not a device torch knows"),
])
def test_bad_model_args_are_refused(tiny, args, message):
    model, _, _ = tiny
    with pytest.raises(UserError, match=message):
        PosencLM.create_from_arg_string(f"pretrained={model},{args}")


def test_importing_posenc_and_its_cli_does_not_import_lm_eval():
    code = ("import sys, posenc, posenc.hf, posenc.cli\n"
            "posenc.cli.build_parser()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'lm_eval'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
