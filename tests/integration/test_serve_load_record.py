"""bench/serve_load.py --db: a tiny load run (SmolLM2, 2 requests at concurrency 2) records its
row through `tq record serve_load` (the model's fingerprint, tq's version and the machine as in
tq's own rows), and `tq report --table` lists it in its serving-load table."""
import json
import pathlib
import sqlite3
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_serve_load_rows_in_the_results_database(tq_bin, smollm2_gguf, tmp_path):
    db = tmp_path / "results.sqlite"
    out = tmp_path / "rows.json"
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "serve_load.py"), "--tq",
                          str(smollm2_gguf), "--tq-bin", tq_bin, "--conc", "2", "--requests", "2",
                          "--ctx", "1024", "--seed", "5", "--json", str(out), "--db", str(db)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    printed = json.loads(out.read_text())
    assert len(printed) == 1 and printed[0]["arm"] == "tq" and printed[0]["concurrency"] == 2

    con = sqlite3.connect(db)
    rows = con.execute("SELECT kind, artifact, model_fingerprint, protocol, result, machine "
                       "FROM runs").fetchall()
    con.close()
    assert len(rows) == 1
    kind, artifact, fingerprint, protocol, result, machine = rows[0]
    assert kind == "serve_load" and artifact == str(smollm2_gguf)
    assert len(fingerprint) == 64 and machine
    assert protocol.startswith("bench/serve_load.py --tq")
    assert json.loads(result) == printed[0]  # every field as the script measured it

    # The same fingerprint tq bench would record for this model.
    bench_db = tmp_path / "bench.sqlite"
    r = subprocess.run([tq_bin, "bench", str(smollm2_gguf), "--prompt-lengths", "8", "--gen", "2",
                        "--repeat", "1", "--db", str(bench_db)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    con = sqlite3.connect(bench_db)
    assert con.execute("SELECT model_fingerprint FROM runs").fetchone()[0] == fingerprint
    con.close()

    rep = subprocess.run([tq_bin, "report", "--db", str(db), "--table", "-o",
                          str(tmp_path / "r.html")], capture_output=True, text=True, timeout=60)
    assert rep.returncode == 0, rep.stderr
    line = next(l for l in rep.stdout.splitlines() if l.split()[2:3] == ["tq"])
    assert f"{printed[0]['aggregate_tok_s']:.1f}" in line.split(), rep.stdout
    assert "Serving load" in (tmp_path / "r.html").read_text()
