"""common.py — helpers for the PyTorch reference tests (tests/golden/test_*.py), run from the repository root.

Each test program prints `PASS name ...`, `FAIL name: ...`, `SKIP name: reason` lines and a final
`N passed, N failed, N skipped` (counted by tests/run.sh) and exits non-zero when anything failed.

Environment: BUILD (default `build`; the binary is $BUILD/cnn), CNN (the binary itself, overrides BUILD),
CNN_TEST_DEVICE (default `cpu`: the engine's --device, and where the PyTorch reference runs), CNN_TEST_THREADS
(the engine's --threads, default 2), CNN_TEST_TIMEOUT (CPU seconds per engine run, default 900; the wall clock
gets ten times that, so a busy machine fails no run), TMPDIR.

    from common import T
    t = T("zoo_infer")                      # parses env, makes the temp dir, sets torch threads/TF32 off
    torch = t.need_torch()                  # returns torch, or prints SKIP and exits 0 when it is missing
    r = t.cnn("infer", "--model", "resnet18", ...)   # r.rc, r.out, r.err, r.secs
    t.check_close("x", ours, ref, 1e-4)     # rel-L2 in float64; NaN/Inf fails
    t.finish()                              # summary line + exit status
"""
import atexit
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))


class Result:
    def __init__(self, rc, out, err, secs, cmd):
        self.rc, self.out, self.err, self.secs, self.cmd = rc, out, err, secs, cmd

    def why(self, limit=600):
        """One line for a FAIL message: exit status, the command and the tail of stderr."""
        err = " | ".join(l for l in self.err.strip().splitlines()[-4:])
        return "exit %s after %.1f s: %s; stderr: %s" % (self.rc, self.secs, self.shell(), err[-limit:])

    def shell(self):
        return " ".join(self.cmd)


class T:
    def __init__(self, name):
        self.name = name
        self.passed = self.failed = self.skipped = 0
        self.build = os.environ.get("BUILD", "build")
        self.binary = os.environ.get("CNN", os.path.join(self.build, "cnn"))
        self.device = os.environ.get("CNN_TEST_DEVICE", "cpu")
        self.threads = os.environ.get("CNN_TEST_THREADS", "2")
        self.timeout = float(os.environ.get("CNN_TEST_TIMEOUT", "900"))
        self.tmp = tempfile.mkdtemp(prefix="cnn-golden-%s." % name, dir=os.environ.get("TMPDIR") or None)
        atexit.register(shutil.rmtree, self.tmp, True)
        self.t0 = time.time()
        self.torch = None

    # ---- counters -------------------------------------------------------------------------------------
    def ok(self, name, msg=""):
        self.passed += 1
        print("PASS %s%s" % (name, " " + msg if msg else ""), flush=True)

    def fail(self, name, msg):
        self.failed += 1
        print("FAIL %s: %s" % (name, msg), flush=True)

    def skip(self, name, msg):
        self.skipped += 1
        print("SKIP %s: %s" % (name, msg), flush=True)

    def check(self, name, cond, msg_ok, msg_fail):
        (self.ok(name, msg_ok) if cond else self.fail(name, msg_fail))
        return cond

    def finish(self):
        print("# %s: %.1f s" % (self.name, time.time() - self.t0), flush=True)
        print("%d passed, %d failed, %d skipped" % (self.passed, self.failed, self.skipped), flush=True)
        sys.exit(1 if self.failed else 0)

    def skip_all(self, reason):
        self.skip(self.name, reason)
        self.finish()

    # ---- environment ----------------------------------------------------------------------------------
    def need_torch(self):
        """Import torch + torchvision and configure them (2 threads; true fp32 on the GPU), or SKIP everything."""
        try:
            import torch
            import torchvision  # noqa: F401
        except ImportError as e:
            self.skip_all("PyTorch/torchvision not importable by %s (%s)" % (sys.executable, e))
        torch.set_num_threads(2)
        if self.device == "cuda":
            if not torch.cuda.is_available():
                self.skip_all("CNN_TEST_DEVICE=cuda but torch.cuda.is_available() is False")
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.benchmark = False
            torch.backends.cudnn.deterministic = True
        self.torch = torch
        return torch

    def tdev(self):
        """The torch device the reference runs on."""
        return "cuda" if self.device == "cuda" else "cpu"

    def need_binary(self):
        """SKIP everything when the engine binary is missing (not built)."""
        if not (os.path.isfile(self.binary) and os.access(self.binary, os.X_OK)):
            self.skip_all("%s not built (run make)" % self.binary)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def rm(self, *names):
        for n in names:
            p = n if os.path.isabs(n) else self.path(n)
            if os.path.isdir(p):
                shutil.rmtree(p, True)
            elif os.path.exists(p):
                os.remove(p)

    # ---- the engine -----------------------------------------------------------------------------------
    def cnn(self, sub, *args, device=True, timeout=None):
        """Run `cnn sub args... [--device D --threads N]` and capture everything; never raises."""
        cmd = [self.binary, sub] + [str(a) for a in args]
        if device:
            cmd += ["--device", self.device, "--threads", self.threads]
        t0 = time.time()
        limit = timeout or self.timeout

        def cpu_limit():  # a hang is caught by CPU seconds, which a busy machine does not inflate
            import resource
            resource.setrlimit(resource.RLIMIT_CPU, (int(limit), int(limit) + 5))
        try:
            # the wall clock only as the last resort, far beyond the CPU limit (threads: up to 8 CPUs' worth)
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10 * limit,
                               preexec_fn=cpu_limit)
            rc, out, err = p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired as e:
            rc, out, err = "timeout", (e.stdout or b"").decode("utf-8", "replace"), \
                "timed out after %.0f s of wall time" % (10 * limit)
        except OSError as e:
            rc, out, err = "oserror", "", str(e)
        return Result(rc, out, err, time.time() - t0, cmd)

    # ---- numerics -------------------------------------------------------------------------------------
    def rel_l2(self, ours, ref):
        """||ours - ref|| / ||ref|| in float64 (inf when ours is not finite or the shapes differ; 0/0 -> 0)."""
        torch = self.torch
        a = ours.detach().to("cpu", torch.float64)
        b = ref.detach().to("cpu", torch.float64)
        if a.shape != b.shape:
            return math.inf
        num = float(torch.linalg.norm((a - b).reshape(-1)))
        den = float(torch.linalg.norm(b.reshape(-1)))
        if not (math.isfinite(num) and math.isfinite(den)):  # a NaN or Inf anywhere makes a norm non-finite
            return math.inf
        if den == 0.0:
            return 0.0 if num == 0.0 else math.inf
        return num / den

    def check_close(self, name, ours, ref, tol, extra=""):
        """PASS when rel-L2(ours, ref) <= tol (NaN/Inf or a shape mismatch fails). Returns the error."""
        if tuple(ours.shape) != tuple(ref.shape):
            self.fail(name, "shape %s, expected %s" % (tuple(ours.shape), tuple(ref.shape)))
            return math.inf
        e = self.rel_l2(ours, ref)
        if e <= tol:
            self.ok(name, "rel-L2 %.2e <= %.0e%s" % (e, tol, extra))
        else:
            nonfinite = not bool(self.torch.isfinite(ours.detach().float()).all())
            self.fail(name, "rel-L2 %.3e > %.0e%s%s" % (e, tol, " (non-finite values)" if nonfinite else "", extra))
        return e


def seeded_input(torch, shape, seed, dtype=None):
    """A reproducible N(0,1) tensor from its own generator (independent of the global RNG)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype or torch.float32)
