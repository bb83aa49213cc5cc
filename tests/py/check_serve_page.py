"""The chat page of `ptxlm serve` in a real browser: headless Chromium
(Debian's chromium package, driven over the DevTools protocol on a pipe)
opens `/?ask=...`, the page streams the answer
from /v1/chat/completions with fetch + ReadableStream, and the DOM it ends
with must hold the same text as the API's greedy answer to that message,
the statistics line and the model's name.
"""
import html.parser
import json
import os
import select
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402
from check_serve import SMOL, Server  # noqa: E402


class Dom(html.parser.HTMLParser):
    """Text of the elements by class, and the body's data-state."""

    def __init__(self):
        super().__init__()
        self.stack, self.texts, self.state = [], {}, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.state = a.get("data-state")
        self.stack.append((tag, a.get("class", ""), a.get("id", "")))
        for key in (a.get("class", ""), "#" + a.get("id", "")):
            self.texts.setdefault(key, []).append("")

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data):
        if self.stack:
            _, cls, ident = self.stack[-1]
            for key in (cls, "#" + ident):
                if self.texts.get(key):
                    self.texts[key][-1] += data


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe
    (--remote-debugging-pipe: JSON messages ended by NUL on fds 3 and 4)."""

    def __init__(self, exe, home):
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()

        def fds():
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        self.p = subprocess.Popen([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                   "--no-first-run", "--remote-debugging-pipe", "about:blank"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=fds, pass_fds=(3, 4),
                                  env={**os.environ, "HOME": home})
        os.close(to_r)
        os.close(from_w)
        self.buf, self.next_id, self.session = b"", 0, None

    def call(self, method, params=None, timeout=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"no answer to {method} in {timeout} s")
                if select.select([self.from_r], [], [], min(left, 1.0))[0]:
                    chunk = os.read(self.from_r, 1 << 16)
                    if not chunk:
                        raise RuntimeError(f"the browser closed the pipe during {method}")
                    self.buf += chunk
                elif self.p.poll() is not None:
                    raise RuntimeError(f"the browser exited ({self.p.returncode}) during {method}")
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def open(self, url):
        target = self.call("Target.createTarget", {"url": url})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    def eval(self, expr):
        return self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True})["result"].get("value")

    def close(self):
        try:
            self.session = None
            self.call("Browser.close", timeout=10)
        except RuntimeError:
            pass
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
        os.close(self.to_w)
        os.close(self.from_r)


def main():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not check(browser is not None, "chromium is not installed (./run.sh installs Debian's chromium package)"):
        return finish()
    s = Server(SMOL, "-t", "2", "-c", "512")
    try:
        q = "What is the capital of France?"
        st, want = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": q}], "max_tokens": 24,
                                                    "temperature": 0})
        check(st == 200, f"API answer: {st} {want}")
        answer = want["choices"][0]["message"]["content"]
        url = f"http://127.0.0.1:{s.port}/?" + urllib.parse.urlencode({"ask": q, "temp": 0, "max": 24})
        b = Browser(browser, str(Path(s.log.name).parent))
        try:
            b.open(url)
            deadline = time.monotonic() + 90
            while b.eval("document.body && document.body.dataset.state") != "answered" and time.monotonic() < deadline:
                time.sleep(0.2)
            page = b.eval("document.documentElement.outerHTML")
        finally:
            b.close()
        dom = Dom()
        dom.feed(page or "")
        check(dom.state == "answered", f"the page did not finish its answer (body data-state {dom.state!r})")
        got = dom.texts.get("msg assistant", [])
        check(got == [answer], f"the page shows {got!r}; the API answered {answer!r}")
        check(dom.texts.get("msg user") == [q], f"user message shown: {dom.texts.get('msg user')}")
        stats = dom.texts.get("stats", [""])[0]
        check("tok/s" in stats and "cached" in stats, f"statistics line: {stats!r}")
        check("SmolLM2-135M-Instruct.Q4_1" in dom.texts.get("#model", [""])[0], f"model: {dom.texts.get('#model')}")
        check(not dom.texts.get("msg error"), f"the page shows an error: {dom.texts.get('msg error')}")
        log = s.stderr()
        check("POST /v1/chat/completions 200" in log and "GET /v1/models 200" in log, "the page's requests in the log")
    finally:
        check(s.stop() == 0, "server exit")
    print(json.dumps({"answer": answer}))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
