"""The processes a run starts (the sidecar, Envoy) and the ports they use.

Every child gets PR_SET_PDEATHSIG=SIGKILL, so it dies with the runner even
when the runner itself is killed; `Proc.stop` ends it by its own pid.
"""

import ctypes
import json
import signal
import socket
import subprocess
import time
import urllib.request

PR_SET_PDEATHSIG = 1


def _die_with_parent():
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """One child process, its output in a log file."""

    def __init__(self, name, argv, log_path):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.popen = None

    def start(self):
        log = open(self.log_path, "ab")
        self.popen = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        log.close()
        return self

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def stop(self, sig=signal.SIGTERM, wait=5.0):
        """Signal the process (by its pid) and reap it, SIGKILL after `wait`."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)
        self.popen = None

    def tail(self, lines=15):
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Sidecar(Proc):
    """The context-assembler server on a fixed loopback port (kept across a
    restart, so Envoy's cluster finds it again)."""

    def __init__(self, binary, port, log_path):
        super().__init__("sidecar", [
            binary, "--listen", f"127.0.0.1:{port}", "--metrics-listen", "off",
            "--memory-store", "off", "--drain-secs", "1",
        ], log_path)
        self.port = port

    def wait_serving(self, timeout):
        """True once grpc.health.v1 answers SERVING, within `timeout` s."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline and self.alive():
                try:
                    answer = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if answer.status == health_pb2.HealthCheckResponse.SERVING:
                        return True
                except grpc.RpcError:
                    pass
                time.sleep(0.1)
        return False


class Envoy(Proc):
    def __init__(self, binary, config_path, admin_port, log_path):
        super().__init__("envoy", [
            binary, "-c", config_path, "--disable-hot-restart", "--concurrency", "1",
            "--file-flush-interval-msec", "50", "--log-level", "warning",
        ], log_path)
        self.admin_port = admin_port

    def admin(self, path, timeout=2):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()

    def wait_ready(self, timeout):
        """True once the admin's /ready answers LIVE, within `timeout` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive():
            try:
                status, text = self.admin("/ready", timeout=1)
                if status == 200 and text.strip() == "LIVE":
                    return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def counter(self, name):
        """A counter's value from the admin's /stats, or None."""
        _, text = self.admin("/stats?format=json&filter=" + urllib.request.quote(f"^{name}$"))
        for stat in json.loads(text).get("stats", []):
            if stat.get("name") == name:
                return stat.get("value")
        return None


def validate(envoy_binary, config_path, timeout=30):
    """(ok, output) of `envoy --mode validate -c config_path`."""
    try:
        done = subprocess.run(
            [envoy_binary, "--mode", "validate", "-c", config_path, "--disable-hot-restart"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
            preexec_fn=_die_with_parent,
        )
    except subprocess.TimeoutExpired:
        return False, f"validate took over {timeout} s"
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    return done.returncode == 0, out
