"""tq under mpirun (Open MPI): `-np 1`, `-np 2` and `-np 4 --oversubscribe` give the same bytes as
the plain single-process run for tq sensitivity, a GPTQ conversion (also rotated and allocated)
and tq ppl / tq kl; a rank
killed mid-job ends the job with one line, and --resume then measures only what was left."""
import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from tinymodels import TINY_LLAMA, tiny_llama_with_sotu

# Six small layers and a real vocabulary (the Llama-2 tokenizer): every step is quick.
CFG = dict(TINY_LLAMA, hidden_size=128, num_hidden_layers=6, intermediate_size=384,
           num_attention_heads=4, num_key_value_heads=2, vocab_size=32000)
RANKS = [1, 2, 4]


def mpi_env():
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1")
    return env


def mpirun(n):
    exe = shutil.which("mpirun")
    if exe is None:
        pytest.skip("mpirun not installed (openmpi-bin; run ./scripts/setup)")
    return [exe, "-np", str(n), "--oversubscribe", "--bind-to", "none"]


@pytest.fixture(scope="module")
def model(tmp_path_factory, tq_cache):
    src, sotu = tiny_llama_with_sotu(tmp_path_factory.mktemp("mpi") / "src", tq_cache, CFG)
    return src, sotu


def run(cmd, timeout=300):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=mpi_env())
    assert r.returncode == 0, r.stderr
    return r


def sens_cmd(tq_bin, src, calib, out):
    return [tq_bin, "sensitivity", str(src), "--calib", str(calib), "--windows", "2", "--seq-len",
            "32", "--bits", "2,4,8", "--no-timings", "-o", str(out), "--json"]


def test_sensitivity_same_bytes_on_any_rank_count(tq_bin, model, tmp_path):
    src, sotu = model
    plain = tmp_path / "plain.json"
    run(sens_cmd(tq_bin, src, sotu[0], plain))
    want = plain.read_bytes()
    assert len(json.loads(want)["modules"]) == 6 * 7 + 1
    for n in RANKS:
        out = tmp_path / f"np{n}.json"
        r = run(mpirun(n) + sens_cmd(tq_bin, src, sotu[0], out))
        assert out.read_bytes() == want, f"-np {n}"
        assert len(r.stdout.splitlines()) == 1, r.stdout  # rank 0 alone reports


def gptq_cmd(tq_bin, src, calib, dst):
    # 64 rows of 32 tokens: four Hessian blocks of 16 rows, so -np 4 gives every rank one.
    return [tq_bin, "convert", str(src), "-o", str(dst), "--bits", "3", "--group-size", "32",
            "--gptq", "--calib", str(calib), "--calib-tokens", "2048", "--calib-seq-len", "32",
            "--no-timings", "--no-db"]


def files(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def strip_times(line):
    j = json.loads(line)
    for k in ("seconds", "tok_s"):
        j.pop(k, None)
    return json.dumps(j, sort_keys=True)


def test_gptq_ppl_kl_same_bytes_on_any_rank_count(tq_bin, model, tmp_path, wiki_text):
    src, sotu = model
    plain = tmp_path / "plain"
    run(gptq_cmd(tq_bin, src, sotu[1], plain))
    want = files(plain)
    ppl = [tq_bin, "ppl", str(plain), "--text", str(wiki_text), "--windows", "6", "--seq-len",
           "64", "--json", "--no-db"]
    kl = [tq_bin, "kl", str(src), str(plain), "--text", str(wiki_text), "--windows", "6",
          "--seq-len", "64", "--json", "--no-db"]
    want_ppl = strip_times(run(ppl).stdout)
    want_kl = strip_times(run(kl).stdout)
    for n in RANKS:
        out = tmp_path / f"np{n}"
        run(mpirun(n) + gptq_cmd(tq_bin, src, sotu[1], out))
        assert files(out) == want, f"-np {n}"
        assert not (tmp_path / f"np{n}.gptq-checkpoint").exists()
        assert strip_times(run(mpirun(n) + ppl).stdout) == want_ppl, f"-np {n}"
        assert strip_times(run(mpirun(n) + kl).stdout) == want_kl, f"-np {n}"


def test_rotated_allocated_gptq_same_bytes_on_two_ranks(tq_bin, model, tmp_path):
    """The rotated, allocated GPTQ conversion: the recovery measured on rank 0 and sent to the
    others, and the untied head's Hessian summed over ranks, give the single process's bytes."""
    src, sotu = model
    table = tmp_path / "rot.json"
    run([tq_bin, "sensitivity", str(src), "--calib", str(sotu[0]), "--windows", "1", "--seq-len",
         "32", "--bits", "2,4", "--rotate-weights", "--no-timings", "-o", str(table)])
    cmd = lambda dst: [tq_bin, "convert", str(src), "-o", str(dst), "--rotate-weights",  # noqa
                       "--gptq", "--target-bpw", "3.5", "--sensitivity", str(table), "--calib",
                       str(sotu[1]), "--calib-tokens", "2048", "--calib-seq-len", "32",
                       "--no-timings", "--no-db"]
    run(cmd(tmp_path / "plain"))
    meta = json.loads((tmp_path / "plain" / "tq_metadata.json").read_text())
    assert meta["module_info"]["lm_head"]["method"] == "gptq"
    assert "lm_head" in meta["allocation"]["gptq_recovery"]["factor"]
    run(mpirun(2) + cmd(tmp_path / "np2"))
    assert files(tmp_path / "np2") == files(tmp_path / "plain")


def rank1_pid(marker):
    """The tq process of mpirun rank 1 whose command line names `marker`."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            exe = os.readlink(f"/proc/{pid}/exe")
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if os.path.basename(exe) == "tq" and b"OMPI_COMM_WORLD_RANK=1" in env and \
                str(marker).encode() in cmd:
            return int(pid)
    return None


def test_killed_rank_ends_the_job_and_resume_skips_finished(tq_bin, model, tmp_path):
    src, sotu = model
    out = tmp_path / "sens.json"
    cmd = mpirun(2) + sens_cmd(tq_bin, src, sotu[0], out) + ["--threads", "1"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=mpi_env(), start_new_session=True)
    deadline = time.time() + 120
    done = []
    while time.time() < deadline and p.poll() is None:
        try:
            done = json.loads(out.read_text())["modules"]
        except (FileNotFoundError, json.JSONDecodeError):
            done = []
        if len(done) >= 3:
            break
        time.sleep(0.02)
    assert p.poll() is None, "finished before a rank could be killed"
    rank1 = rank1_pid(out)
    t0 = time.time()
    os.kill(rank1, signal.SIGKILL)
    _, err = p.communicate(timeout=60)
    assert p.returncode != 0
    assert time.time() - t0 < 30, "the job hung after a rank died"
    lines = [l for l in err.splitlines() if l.startswith("tq ")]
    assert len(lines) == 1 and "rank" in lines[0] and "--resume" in lines[0], err
    before = json.loads(out.read_text())["modules"]
    assert 3 <= len(before) < 43

    r = run(mpirun(2) + sens_cmd(tq_bin, src, sotu[0], out) + ["--resume"])
    summary = json.loads(r.stdout)
    assert summary["modules"] == 43 and summary["measured"] == 43 - len(before)
    plain = tmp_path / "plain.json"
    run(sens_cmd(tq_bin, src, sotu[0], plain))
    assert out.read_bytes() == plain.read_bytes()


def test_gptq_killed_rank_resumes_on_another_rank_count(tq_bin, model, tmp_path):
    src, sotu = model
    plain, out, ck = tmp_path / "plain", tmp_path / "out", tmp_path / "ck"
    cmd = gptq_cmd(tq_bin, src, sotu[1], out)
    cmd[cmd.index("--calib-tokens") + 1] = "8192"  # 256 rows: long enough to kill it midway
    run([a if a != str(out) else str(plain) for a in cmd])
    p = subprocess.Popen(mpirun(2) + cmd + ["--gptq-checkpoint", str(ck)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=mpi_env(), start_new_session=True)
    deadline, killed = time.time() + 120, False
    while time.time() < deadline and p.poll() is None:
        try:
            n = json.loads((ck / "state.json").read_text())["next_layer"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            n = 0
        if 1 <= n < 6:
            pid = rank1_pid(out)
            if pid:
                os.kill(pid, signal.SIGKILL)
                killed = True
                break
        time.sleep(0.01)
    _, err = p.communicate(timeout=60)
    assert killed and p.returncode != 0, err
    assert not out.exists()
    r = run(mpirun(4) + cmd + ["--gptq-checkpoint", str(ck), "--resume"])
    assert "gptq layer 1/6" not in r.stderr  # finished layers are not recomputed
    assert files(out) == files(plain)
    assert not ck.exists()
