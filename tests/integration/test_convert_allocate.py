"""tq convert --target-bpw/--target-size --sensitivity on a tiny llama: the allocated plan lands
within 0.02 bpw below the target, modules pinned by --keep-float stay float, the allocation is
recorded in tq_metadata.json, a bad sensitivity file is a one-line error naming it, and the
published artifact gets a "convert" row in the results database."""
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tinymodels  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
WIKI = REPO / "data" / "wikitext-2-raw" / "wiki.test.raw"

# Wide MLP so that one bit of the smallest module (k/v: 64x128) is < 0.01 bpw of the model.
CFG = dict(tinymodels.TINY_LLAMA, hidden_size=128, num_hidden_layers=2, intermediate_size=1024,
           num_attention_heads=4, num_key_value_heads=2, vocab_size=384,
           max_position_embeddings=512, tie_word_embeddings=True)
PINNED = "model.layers.0.self_attn.k_proj"


def tq(*args, ok=True):
    r = subprocess.run([TQ_BIN, *map(str, args)], capture_output=True, text=True, timeout=300)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("alloc")
    src = root / "src"
    tinymodels.write_tiny_hf_dir(src, CFG, seed=7)
    tinymodels.write_tiny_tokenizer(src)
    calib = root / "calib.txt"
    calib.write_bytes(WIKI.read_bytes()[:6000])
    sens = root / "sens.json"
    tq("sensitivity", src, "--calib", calib, "--windows", "2", "--seq-len", "32", "--bits",
       "2,3,4,5,6,8", "-o", sens)  # with only 3,4,8 the 6.0 optimum sits 0.23 bpw below
    return {"root": root, "src": src, "sens": sens}


def one_line_error(r, *needles):
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("target", [4.0, 6.0])
def test_target_bpw_is_met_and_recorded(env, target):
    root, src, sens = env["root"], env["src"], env["sens"]
    out = root / f"alloc-{target}"
    db = root / "results.sqlite"
    common = [src, "--target-bpw", target, "--sensitivity", sens, "--keep-float", PINNED,
              "--dtype", "bf16"]
    dry = json.loads(tq("convert", *common, "--dry-run", "--json").stdout)
    alloc = dry["allocation"]
    assert alloc["achieved_bpw"] == pytest.approx(dry["bpw"])
    assert target - 0.02 <= dry["bpw"] <= target
    assert alloc["predicted_kl"] > 0 and alloc["pinned_modules"] == 1
    assert dry["modules"][PINNED] == "float"
    # The guard against the best uniform plan of at most the same bytes, from the same table.
    uni = alloc["uniform"]
    assert uni["predicted_better"] is False
    assert uni["spec"] and uni["bytes"] <= alloc["bytes"]
    assert uni["predicted_kl"] >= alloc["predicted_kl"] * (1 - 1e-9)
    text = tq("convert", *common, "--dry-run").stdout
    assert "predicted summed KL" in text and f"{dry['bpw']:.4f} bpw" in text
    assert f"uniform:    {uni['spec']} at {uni['bytes']} bytes" in text, text

    tq("convert", *common, "-o", out, "--db", db)
    info = json.loads(tq("inspect", out, "--json").stdout)
    assert target - 0.02 <= info["bpw"] <= target
    assert info["bpw"] == pytest.approx(dry["bpw"], abs=1e-9)
    meta = json.loads((out / "tq_metadata.json").read_text())
    assert meta["modules"][PINNED] == "float"
    specs = {json.dumps(v, sort_keys=True) for k, v in meta["modules"].items() if k != PINNED}
    assert len(specs) >= 2  # mixed precision, not a uniform plan
    a = meta["allocation"]
    assert a["target_bpw"] == target and a["achieved_bpw"] == pytest.approx(info["bpw"])
    assert a["predicted_kl"] == pytest.approx(alloc["predicted_kl"])
    assert a["uniform"] == uni
    import hashlib
    assert a["sensitivity"]["sha256"] == hashlib.sha256(sens.read_bytes()).hexdigest()

    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT kind, artifact, base_artifact, result FROM runs").fetchall()
    mine = [r for r in rows if r[1] == str(out)]
    assert len(mine) == 1 and mine[0][0] == "convert"
    assert Path(mine[0][2]).resolve() == src.resolve()
    res = json.loads(mine[0][3])
    assert res["bpw"] == pytest.approx(info["bpw"]) and res["bytes"] == info["bytes"]
    assert res["recipe"].startswith(f"allocated {target}")
    assert res["allocation"]["predicted_kl"] == pytest.approx(a["predicted_kl"])


def test_higher_target_predicts_lower_kl(env):
    kls = []
    for t in (3.8, 5.0, 7.0):
        d = json.loads(tq("convert", env["src"], "--target-bpw", t, "--sensitivity", env["sens"],
                          "--dtype", "bf16", "--dry-run", "--json").stdout)
        kls.append(d["allocation"]["predicted_kl"])
    assert kls[0] > kls[1] > kls[2]


def test_target_size_and_no_db(env, tmp_path):
    d = json.loads(tq("convert", env["src"], "--target-size", "500000", "--sensitivity",
                      env["sens"], "--dtype", "bf16", "--dry-run", "--json").stdout)
    assert 500000 - 0.02 * d["params"] / 8 <= d["bytes"] <= 500000
    db = tmp_path / "none.sqlite"
    r = tq("convert", env["src"], "--bits", "8", "-o", tmp_path / "q8", "--no-db", "--db", db,
           ok=False)
    assert r.returncode != 0 and "--db excludes --no-db" in r.stderr
    assert not db.exists() and not (tmp_path / "q8").exists()
    xdg = tmp_path / "xdg"  # where the default database would go
    subprocess.run([TQ_BIN, "convert", str(env["src"]), "--bits", "8", "-o", str(tmp_path / "q8"),
                    "--no-db"], check=True, capture_output=True,
                   env=dict(os.environ, XDG_DATA_HOME=str(xdg)))
    assert (tmp_path / "q8").is_dir() and not xdg.exists()
    tq("convert", env["src"], "--bits", "8", "-o", tmp_path / "q8b", "--db", db)
    with sqlite3.connect(db) as c:
        (kind, res), = c.execute("SELECT kind, result FROM runs").fetchall()
    assert kind == "convert" and json.loads(res)["recipe"] == "affine 8-bit g64"


def test_bad_sensitivity_files(env, tmp_path):
    src, sens = env["src"], env["sens"]
    base = [src, "--target-bpw", "4.5", "--dry-run"]

    t = json.loads(sens.read_text())
    t["model_fingerprint"] = "0" * 64
    other = tmp_path / "other.json"
    other.write_text(json.dumps(t))
    one_line_error(tq("convert", *base, "--sensitivity", other, ok=False), str(other),
                   "another model")

    t = json.loads(sens.read_text())
    t["modules"] = [m for m in t["modules"] if m["name"] != "model.layers.1.mlp.up_proj"]
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps(t))
    one_line_error(tq("convert", *base, "--sensitivity", partial, ok=False), str(partial),
                   "model.layers.1.mlp.up_proj")
    # ...unless a recipe pins that module.
    tq("convert", src, "--target-bpw", "6", "--dtype", "bf16", "--dry-run", "--sensitivity", partial,
       "--keep-float", "model.layers.1.mlp.up_proj")

    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    one_line_error(tq("convert", *base, "--sensitivity", garbage, ok=False), str(garbage))

    one_line_error(tq("convert", src, "--target-bpw", "1.0", "--sensitivity", sens, "--dry-run",
                      ok=False), "below the smallest plan", "bpw")


def test_sensitivity_measured_when_absent(env, tmp_path):
    """No --sensitivity: the table is measured with tq sensitivity's defaults under
    $XDG_DATA_HOME/turboquant/sensitivity and reused by the next run."""
    xdg = Path(os.environ["XDG_DATA_HOME"])
    cmd = [TQ_BIN, "convert", str(env["src"]), "--target-bpw", "4.5", "--dtype", "bf16",
           "--dry-run", "--json"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    tables = list((xdg / "turboquant" / "sensitivity").glob("*.json"))
    assert len(tables) == 1, tables
    assert "modules x" in first.stderr  # it measured
    plan = json.loads(first.stdout)
    assert plan["allocation"]["sensitivity"]["path"] == str(tables[0])
    assert 4.48 <= plan["bpw"] <= 4.5
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    assert "modules x" not in second.stderr  # every module was already measured
    assert json.loads(second.stdout)["modules"] == plan["modules"]


def test_min_bits_rules_are_honoured_by_allocation(env, tmp_path):
    recipe = tmp_path / "min.json"
    recipe.write_text(json.dumps({"rules": [{"match": "role:mlp_down", "min_bits": 6}]}))
    r = tq("convert", env["src"], "--target-bpw", "4.0", "--dtype", "bf16", "--dry-run", "--json",
           "--sensitivity", env["sens"], "--recipe", recipe)
    plan = json.loads(r.stdout)
    downs = {m: s for m, s in plan["modules"].items() if m.endswith("mlp.down_proj")}
    assert downs and all(s != "float" and s["bits"] >= 6 for s in downs.values()), downs
    assert plan["allocation"]["free_modules"] == len(plan["modules"])  # a minimum pins nothing
    assert 3.98 <= plan["bpw"] <= 4.0


def test_rotated_allocation_needs_a_rotated_table(env, tmp_path):
    """tq sensitivity --rotate-weights measures on the folded model (untied: lm_head appears);
    tq convert --rotate-weights --target-bpw uses it, and refuses a table of the other kind."""
    src, calib = env["src"], env["root"] / "calib.txt"
    rot = tmp_path / "rot.json"
    tq("sensitivity", src, "--calib", calib, "--windows", "2", "--seq-len", "32", "--bits",
       "2,3,4,5,6,8", "--rotate-weights", "--seed", "3", "-o", rot)
    t = json.loads(rot.read_text())
    assert t["rotation"] == {"r1": "hadamard", "r2": "hadamard", "seed": 3}
    assert t["tie_word_embeddings"] is False
    assert "lm_head" in [m["name"] for m in t["modules"]]
    assert not (tmp_path / "rot.json.folded").exists()  # the folded copy is removed
    out = tmp_path / "rot-alloc"
    tq("convert", src, "-o", out, "--target-bpw", "4.0", "--dtype", "bf16", "--rotate-weights",
       "--seed", "3", "--sensitivity", rot, "--no-db")
    meta = json.loads((out / "tq_metadata.json").read_text())
    assert 3.98 <= meta["allocation"]["achieved_bpw"] <= 4.0
    assert (out / "rotation.json").exists()
    # The untie's bytes are reported, and --target-size holds the untied plan to a tied one's.
    tied = json.loads(tq("convert", src, "--target-bpw", "4.0", "--dry-run", "--json",
                         "--sensitivity", env["sens"]).stdout)
    assert "untied_head_bytes" not in tied
    rot_bpw = json.loads(tq("convert", src, "--target-bpw", "4.0", "--dry-run", "--json",
                            "--rotate-weights", "--seed", "3", "--sensitivity", rot).stdout)
    head = rot_bpw["untied_head_bytes"]
    assert 0 < head < rot_bpw["bytes"] and rot_bpw["bytes"] > tied["bytes"]
    r = tq("convert", src, "--target-size", tied["bytes"], "--dry-run", "--rotate-weights",
           "--seed", "3", "--sensitivity", rot)
    assert "unties the tied head: lm_head adds" in r.stdout, r.stdout
    rot_size = json.loads(tq("convert", src, "--target-size", tied["bytes"], "--dry-run",
                             "--json", "--rotate-weights", "--seed", "3", "--sensitivity",
                             rot).stdout)
    assert tied["bytes"] - 2000 <= rot_size["bytes"] <= tied["bytes"]
    one_line_error(tq("convert", src, "--target-bpw", "4.0", "--dry-run", "--sensitivity", rot,
                      ok=False), str(rot), "no rotation")
    one_line_error(tq("convert", src, "--target-bpw", "4.0", "--dry-run", "--rotate-weights",
                      "--seed", "4", "--sensitivity", rot, ok=False), "seed=4")
    one_line_error(tq("convert", src, "--target-bpw", "4.0", "--dry-run", "--rotate-weights",
                      "--sensitivity", env["sens"], ok=False), "no rotation")


def test_gptq_allocation_is_corrected_by_measured_recovery(env, tmp_path):
    """With --gptq and a target, each role's RTN KLs are scaled by what GPTQ recovers, measured
    on sampled layers first and recorded; the corrected plan predicts less loss than the
    uncorrected one at the same bytes; --gptq-recovery off and misuse behave as documented."""
    src, calib = env["src"], env["root"] / "calib.txt"
    base = ["convert", src, "--target-bpw", "4.0", "--dry-run", "--json", "--sensitivity",
            env["sens"], "--gptq", "--calib", calib, "--calib-tokens", "1024",
            "--calib-seq-len", "64"]
    on = json.loads(tq(*base).stdout)["allocation"]
    off = json.loads(tq(*base, "--gptq-recovery", "off").stdout)["allocation"]
    rec = on["gptq_recovery"]
    assert off["gptq_recovery"] is None
    assert rec["layers"] == [0, 1] and rec["modules"] == 14 and rec["rows"] == 16
    roles = {"attn_q", "attn_k", "attn_v", "attn_o", "mlp_gate", "mlp_up", "mlp_down"}
    assert set(rec["factor"]) == roles
    sens = json.loads(Path(env["sens"]).read_text())
    measured = {f"affine {s['bits']}-bit g{s['group_size']}" for s in sens["specs"]
                if s["bits"] <= sens["scaled_above_bits"]}
    for role, by_spec in rec["factor"].items():
        assert set(by_spec) == measured, role
        # GPTQ falls back to RTN when it does not help, so it never loses more than RTN.
        assert all(0 < f <= 1.0 + 1e-9 for f in by_spec.values()), (role, by_spec)
    assert abs(on["bytes"] - off["bytes"]) <= 0.02 * on["bytes"] / 4.0
    assert on["predicted_kl"] < off["predicted_kl"]
    # A tied head by GPTQ without a rotation: the embedding (the head) arrives before the layers
    # and the final norm after them; its rows are sampled once both are there.
    tied = json.loads(tq(*base, "--gptq-tied-head", "0.1").stdout)["allocation"]["gptq_recovery"]
    assert set(tied["factor"]) == roles | {"embed"}, tied["factor"]
    one_line_error(tq("convert", src, "--target-bpw", "4.0", "--dry-run", "--sensitivity",
                      env["sens"], "--gptq-recovery", "off", ok=False), "--gptq-recovery")
    one_line_error(tq("convert", src, "--gptq", "--bits", "4", "--dry-run", "--gptq-recovery",
                      "on", ok=False), "--gptq-recovery")
