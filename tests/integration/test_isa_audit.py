"""scripts/isa-audit: each function may use only the instructions its dispatch target's run-time
check establishes. The listings are real `objdump -d -w` lines (the VEX vpdpbusd is the one the
AVX3_DL int8 kernel had, which faulted on Zen 4); the last tests audit the built binaries."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
AUDIT = ROOT / "scripts" / "isa-audit"

AVX3_DL_FN = "00000000002f3570 <_ZN2tq9N_AVX3_DL6RowsQ4ILi8EtEEvRKNS_12PackedMatrixEPKPKhPKPKT0_SD_PKaSF_SF_SF_PKfSH_SH_Pfl>:"
AVX3_FN = "00000000002f3570 <_ZN2tq6N_AVX36RowsQ4ILi8EtEEvRKNS_12PackedMatrixEPKPKhPKPKT0_SD_PKaSF_SF_SF_PKfSH_SH_Pfl>:"
AVX2_FN = "0000000000300000 <_ZN2tq6N_AVX212MatmulQ8ImplERKNS_12PackedMatrixE>:"
BASE_FN = "0000000000310000 <_ZN2tq12_GLOBAL__N_116transpose_groupsEPKalPa>:"
AMX_FN = "0000000000320000 <_ZN2tq10amx_target12_GLOBAL__N_18amx_rowsERKNS_12PackedMatrixE>:"
LAMBDA_FN = "0000000000330000 <_ZZN2tq9N_AVX3_DL12MatmulQ8ImplERKNS_12PackedMatrixEENKUlvE_clEv>:"
STD_FN = "0000000000340000 <_ZNSt6vectorIfSaIfEE17_M_realloc_insertIJRKfEEEvN9__gnu_cxx17__normal_iteratorIPfS1_EEDpOT_>:"

VEX_VNNI = "  2e2d17:\tc4 22 7d 50 04 00    \t{vex} vpdpbusd (%rax,%r8,1),%ymm0,%ymm8"
EVEX_VNNI = "  2e2a21:\t62 b2 45 48 50 c0    \tvpdpbusd %zmm16,%zmm7,%zmm0"
ZMM_MOVE = "  2c9ec0:\t62 f1 fe 48 6f 2f    \tvmovdqu64 (%rdi),%zmm5"
VEX_ADD = "  2c9f00:\tc5 f5 fe c1          \tvpaddd %ymm1,%ymm1,%ymm0"
FMA = "  2c9f04:\tc4 e2 7d b8 c1       \tvfmadd231ps %ymm1,%ymm0,%ymm0"
SSE_ADD = "  2c9f10:\t0f 58 c1             \taddps  %xmm1,%xmm0"
PSHUFB = "  2c9f14:\t66 0f 38 00 c1       \tpshufb %xmm1,%xmm0"
TDPBSSD = "  2cb3a0:\tc4 e2 73 5e c2       \ttdpbssd %tmm1,%tmm2,%tmm0"
VPERMB = "  2cb3b0:\t62 f2 75 48 8d c2    \tvpermb %zmm2,%zmm1,%zmm0"
BF16 = "  2cb3c0:\t62 f2 76 48 52 c2    \tvdpbf16ps %zmm2,%zmm1,%zmm0"
FP16 = "  2cb3d0:\t62 f5 74 48 58 c2    \tvaddph %zmm2,%zmm1,%zmm0"
CLMUL_XMM = "  2cb3e0:\tc4 e3 71 44 c2 00    \tvpclmulqdq $0x0,%xmm2,%xmm1,%xmm0"
CLMUL_YMM = "  2cb3f0:\tc4 e3 75 44 c2 00    \tvpclmulqdq $0x0,%ymm2,%ymm1,%ymm0"


def audit(tmp_path, *lines):
    f = tmp_path / "listing.txt"
    f.write_text("\n".join(lines) + "\n")
    return subprocess.run([sys.executable, str(AUDIT), "--objdump", str(f)], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("fn,insn,needs", [
    (AVX3_DL_FN, VEX_VNNI, "avxvnni"),   # the Zen 4 SIGILL
    (LAMBDA_FN, VEX_VNNI, "avxvnni"),    # a lambda inside a target function is that target's
    (AVX3_FN, EVEX_VNNI, "avx512vnni"),  # VNNI is not part of plain AVX-512
    (AVX2_FN, ZMM_MOVE, "avx512f"),
    (BASE_FN, ZMM_MOVE, "avx512f"),
    (BASE_FN, VEX_ADD, "avx"),
    (BASE_FN, PSHUFB, "ssse3"),
    (STD_FN, FMA, "fma"),                # a std template instantiated from target code is baseline
    (AVX3_DL_FN, TDPBSSD, "amx"),        # AMX only in amx_target
    (AVX3_FN, VPERMB, "avx512vbmi"),
    (AVX3_DL_FN, BF16, "avx512bf16"),    # no target of ours checks BF16
    (AMX_FN, FP16, "avx512fp16"),
    (AVX2_FN, CLMUL_YMM, "vpclmulqdq"),  # the ymm form is VPCLMULQDQ, not AVX2's PCLMUL
])
def test_flags_instructions_outside_the_target(tmp_path, fn, insn, needs):
    r = audit(tmp_path, fn, SSE_ADD, insn)
    assert r.returncode == 1, r.stdout + r.stderr
    assert needs in r.stdout, r.stdout


@pytest.mark.parametrize("fn,insn", [
    (AVX3_DL_FN, EVEX_VNNI), (AVX3_DL_FN, VPERMB), (AVX3_FN, ZMM_MOVE), (AVX2_FN, VEX_ADD),
    (AVX2_FN, FMA), (AMX_FN, TDPBSSD), (AMX_FN, ZMM_MOVE), (BASE_FN, SSE_ADD),
    (LAMBDA_FN, EVEX_VNNI), (AVX2_FN, CLMUL_XMM),
])
def test_passes_instructions_the_target_checks(tmp_path, fn, insn):
    r = audit(tmp_path, fn, insn)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("which", ["tq_bin", "tq_tests_bin"])
def test_built_binaries_are_clean(request, which):
    binary = request.getfixturevalue(which)
    r = subprocess.run([sys.executable, str(AUDIT), binary], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr
    assert "0 with instructions outside their target" in r.stdout
