"""`--model ORG/NAME` fetched from the Hub when it is not in the cache, against a local server on
127.0.0.1 that serves the Hub's paths with the Hub's headers (/api/models/<id>/revision/<rev>:
the commit; /<id>/resolve/<commit>/config.json: the file, its ETag and X-Repo-Commit):
fetched once into huggingface_hub's cache layout, then read from it without the network;
$HF_HUB_OFFLINE; revisions (ORG/NAME@REV); a gated repository without a token, with one
($HF_TOKEN, the token file) sent as "Authorization: Bearer", with a refused one; a missing
repository; a server that stalls (timeout); a body over the cap; progress lines on a terminal
only."""
import hashlib
import http.server
import json
import os
import pty
import subprocess
import tempfile
import threading
import time
import unittest

BIN = os.environ["OOMLESS_BIN"]
SRC = os.environ["OOMLESS_SRC"]
TOKEN = "hf_secret_test_token"

with open(os.path.join(SRC, "tests", "data", "estimate_tiny_llama.json"), "rb") as f:
    TINY = json.load(f)


def config(vocab):
    return json.dumps(dict(TINY, vocab_size=vocab), indent=2).encode()


def commit_of(text):
    return hashlib.sha1(text.encode()).hexdigest()


# repository -> revision -> (commit, config.json); "gated" needs the token
REPOS = {
    "test/tiny": {"main": (commit_of("tiny-main"), config(1111)),
                  "v1": (commit_of("tiny-v1"), config(2222))},
    "test/gated": {"main": (commit_of("gated"), config(3333))},
    "Test/Other": {"main": (commit_of("other"), config(4444))},
}
BIG = 17 << 20  # over the client's 16 MiB cap


class Hub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log = None  # [(path, authorization)], set per test

    def log_message(self, *args):
        pass

    def send(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def error(self, status, code, message):
        self.send(status, json.dumps({"error": message}).encode(),
                  [("X-Error-Code", code), ("X-Error-Message", message),
                   ("Content-Type", "application/json")])

    def do_GET(self):
        Hub.log.append((self.path, self.headers.get("Authorization")))
        parts = self.path.split("/")
        if self.path.startswith("/api/models/"):
            repo, rev = "/".join(parts[3:5]), parts[6] if len(parts) > 6 else ""
        elif len(parts) > 5 and parts[3] == "resolve":
            repo, rev = "/".join(parts[1:3]), parts[4]
        else:
            return self.error(404, "EntryNotFound", "no such path")
        if repo == "test/stall":  # answers nothing: the client's stall limit ends it
            time.sleep(8)
            return self.send(200, b"{}")
        if repo == "test/huge":
            if self.path.startswith("/api/"):
                return self.send(200, json.dumps({"sha": commit_of("huge")}).encode())
            # streamed without a length: the client stops reading at its cap
            self.send_response(200)
            self.send_header("ETag", '"%s"' % commit_of("huge"))
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b" " * (1 << 20)
            try:
                for _ in range(BIG >> 20):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
            return None
        if repo not in REPOS:
            return self.error(404, "RepoNotFound", "Repository not found")
        if repo == "test/gated":
            auth = self.headers.get("Authorization")
            if auth is None:
                return self.error(401, "GatedRepo", "Access to model test/gated is restricted")
            if auth != "Bearer " + TOKEN:
                return self.error(403, "GatedRepo", "Access to model test/gated is restricted")
        revisions = REPOS[repo]
        if self.path.startswith("/api/"):
            if rev not in revisions:
                return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
            sha = revisions[rev][0]
            return self.send(200, json.dumps({"id": repo, "sha": sha, "siblings": [
                {"rfilename": "config.json"}]}).encode(), [("Content-Type", "application/json")])
        by_commit = {c: body for c, body in revisions.values()}
        if rev not in by_commit or parts[5] != "config.json":
            return self.error(404, "EntryNotFound", "Entry not found")
        body = by_commit[rev]
        blob = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()  # git's blob id
        self.send(200, body, [("ETag", '"%s"' % blob), ("X-Repo-Commit", rev),
                              ("Content-Type", "application/json")])


class HubFetchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
        cls.server.daemon_threads = True
        cls.thread = threading.Thread(target=cls.server.serve_forever, daemon=True)
        cls.thread.start()
        cls.endpoint = "http://127.0.0.1:%d" % cls.server.server_address[1]

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()  # in the test's TMPDIR
        self.cache = os.path.join(self.tmp.name, "hub")
        Hub.log = []
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("HF_") and k not in ("XDG_CACHE_HOME",)}
        self.env.update(HF_ENDPOINT=self.endpoint + "/", HF_HUB_CACHE=self.cache,
                        HOME=os.path.join(self.tmp.name, "home"),
                        HF_HOME=os.path.join(self.tmp.name, "hf-home"))

    def tearDown(self):
        self.tmp.cleanup()

    def oom(self, model, **env):
        proc = subprocess.run([BIN, "estimate", "--model", model, "--seq", "64", "--json"],
                              env=dict(self.env, **env), capture_output=True, text=True,
                              timeout=120)
        vocab = json.loads(proc.stdout)["model"]["vocab"] if proc.returncode == 0 else None
        return proc.returncode, vocab, proc.stderr

    def test_fetch_then_cache(self):
        rc, vocab, err = self.oom("test/tiny")
        self.assertEqual((rc, vocab), (0, 1111), err)
        commit, body = REPOS["test/tiny"]["main"]
        self.assertEqual([p for p, _a in Hub.log],
                         ["/api/models/test/tiny/revision/main",
                          "/test/tiny/resolve/%s/config.json" % commit])
        # huggingface_hub's layout: refs/main, the blob named by the ETag, a relative link
        repo = os.path.join(self.cache, "models--test--tiny")
        with open(os.path.join(repo, "refs", "main")) as f:
            self.assertEqual(f.read(), commit)
        link = os.path.join(repo, "snapshots", commit, "config.json")
        blob = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()
        self.assertEqual(os.readlink(link), "../../blobs/" + blob)
        with open(os.path.join(repo, "blobs", blob), "rb") as f:
            self.assertEqual(f.read(), body)
        self.assertEqual(sorted(os.listdir(os.path.join(repo, "blobs"))), [blob])  # no temp
        # the second call reads the cache: no request, with or without $HF_HUB_OFFLINE
        Hub.log = []
        self.assertEqual(self.oom("test/tiny")[:2], (0, 1111))
        self.assertEqual(self.oom("test/tiny", HF_HUB_OFFLINE="1")[:2], (0, 1111))
        self.assertEqual(Hub.log, [])

    def test_revision(self):
        rc, vocab, err = self.oom("test/tiny@v1")
        self.assertEqual((rc, vocab), (0, 2222), err)
        self.assertEqual(Hub.log[0][0], "/api/models/test/tiny/revision/v1")
        repo = os.path.join(self.cache, "models--test--tiny")
        with open(os.path.join(repo, "refs", "v1")) as f:
            self.assertEqual(f.read(), REPOS["test/tiny"]["v1"][0])
        self.assertEqual(self.oom("test/tiny")[:2], (0, 1111))  # main is another commit
        Hub.log = []
        self.assertEqual(self.oom("test/tiny@v1", HF_HUB_OFFLINE="1")[:2], (0, 2222))
        commit = REPOS["test/tiny"]["v1"][0]
        self.assertEqual(self.oom("test/tiny@" + commit, HF_HUB_OFFLINE="1")[:2], (0, 2222))
        self.assertEqual(Hub.log, [])
        rc, _v, err = self.oom("test/tiny@v9")
        self.assertEqual(rc, 2)
        self.assertIn("it has no revision 'v9' on %s (HTTP 404)" % self.endpoint, err)
        rc, _v, err = self.oom("test/tiny@")
        self.assertEqual(rc, 2)
        self.assertIn("names a branch, tag or commit after the '@'", err)
        rc, _v, err = self.oom("test/tiny@../x")
        self.assertEqual(rc, 2)
        self.assertIn("the revision '../x' is no branch, tag or commit name", err)

    def test_offline(self):
        rc, _v, err = self.oom("test/tiny", HF_HUB_OFFLINE="1")
        self.assertEqual(rc, 2)
        self.assertIn("is not in the Hugging Face cache (%s), could not be fetched "
                      "($HF_HUB_OFFLINE is set)" % self.cache, err)
        self.assertIn("run 'hf download test/tiny config.json'", err)
        self.assertEqual(Hub.log, [])

    def test_gated(self):
        rc, _v, err = self.oom("test/gated")
        self.assertEqual(rc, 2)
        self.assertIn("it is gated or private on %s (HTTP 401; no token is set): accept its "
                      "licence on %s/test/gated" % (self.endpoint, self.endpoint), err)
        self.assertIn("set $HF_TOKEN", err)
        self.assertEqual(Hub.log, [("/api/models/test/gated/revision/main", None)])
        Hub.log = []
        rc, vocab, err = self.oom("test/gated", HF_TOKEN=TOKEN)
        self.assertEqual((rc, vocab), (0, 3333), err)
        self.assertEqual([a for _p, a in Hub.log], ["Bearer " + TOKEN] * 2)
        self.assertNotIn(TOKEN, err)

    def test_token_file_and_refused_token(self):
        home = self.env["HF_HOME"]
        os.makedirs(home)
        with open(os.path.join(home, "token"), "w") as f:
            f.write(TOKEN + "\n")
        rc, vocab, err = self.oom("test/gated")
        self.assertEqual((rc, vocab), (0, 3333), err)
        self.assertEqual(Hub.log[0][1], "Bearer " + TOKEN)
        rc, _v, err = self.oom("test/gated", HF_HUB_CACHE=os.path.join(self.tmp.name, "other"),
                               HF_TOKEN="hf_wrong")
        self.assertEqual(rc, 2)
        self.assertIn("(HTTP 403; the token given ($HF_TOKEN or the token file) was refused)",
                      err)

    def test_missing(self):
        rc, _v, err = self.oom("test/nothing")
        self.assertEqual(rc, 2)
        self.assertIn("could not be fetched (%s has no such model (HTTP 404)" % self.endpoint,
                      err)
        # a preset by the name's architecture stands in, saying why the Hub did not answer
        rc, vocab, err = self.oom("Qwen/Qwen2.5-7B-Instruct")
        self.assertEqual(rc, 0, err)
        self.assertIn("could not be fetched (%s has no such model (HTTP 404)" % self.endpoint,
                      err)
        self.assertIn("using the preset qwen2.5-7b", err)

    def test_case_of_the_cached_folder(self):
        """An id spelled in another case finds the folder the Hub client made."""
        self.assertEqual(self.oom("Test/Other")[:2], (0, 4444))
        Hub.log = []
        self.assertEqual(self.oom("test/other", HF_HUB_OFFLINE="1")[:2], (0, 4444))
        self.assertEqual(os.listdir(self.cache), ["models--Test--Other"])

    def test_stall(self):
        start = time.monotonic()
        rc, _v, err = self.oom("test/stall", HF_HUB_ETAG_TIMEOUT="1")
        self.assertEqual(rc, 2)
        self.assertIn("/api/models/test/stall/revision/main' did not answer within 1 s", err)
        self.assertLess(time.monotonic() - start, 60)  # bounded, not the server's 8 s x n

    def test_too_large(self):
        rc, _v, err = self.oom("test/huge")
        self.assertEqual(rc, 2)
        self.assertIn("config.json' sends more than %d bytes: refused" % (16 << 20), err)
        self.assertFalse(os.path.exists(os.path.join(self.cache, "models--test--huge",
                                                     "snapshots")))

    def test_bad_timeout(self):
        rc, vocab, err = self.oom("test/tiny", HF_HUB_ETAG_TIMEOUT="soon")
        self.assertEqual((rc, vocab), (0, 1111), err)
        self.assertIn("$HF_HUB_ETAG_TIMEOUT 'soon' is not a whole number of seconds", err)

    def test_progress_on_a_terminal_only(self):
        rc, _v, err = self.oom("test/tiny")
        self.assertEqual(rc, 0, err)
        self.assertNotIn("fetching", err)  # stderr is a pipe: no progress
        master, slave = pty.openpty()
        try:
            env = dict(self.env, HF_HUB_CACHE=os.path.join(self.tmp.name, "tty"))
            proc = subprocess.run([BIN, "estimate", "--model", "test/tiny", "--seq", "64", "--json"],
                                  env=env,
                                  stdout=subprocess.PIPE, stderr=slave, timeout=120)
            os.close(slave)
            slave = None
            text = b""
            while True:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                text += chunk
        finally:
            if slave is not None:
                os.close(slave)
            os.close(master)
        self.assertEqual(proc.returncode, 0)
        text = text.decode()
        self.assertIn("oomless: fetching config.json of test/tiny from %s" % self.endpoint, text)
        self.assertIn("oomless: fetched config.json of test/tiny (", text)
        json.loads(proc.stdout)  # stdout is still one JSON document


if __name__ == "__main__":
    unittest.main()
