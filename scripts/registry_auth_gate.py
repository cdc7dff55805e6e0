"""HTTP basic authentication in front of a schema registry, for scripts/schema-registry-local.

Apicurio Registry's own authentication needs an OpenID Connect server (Keycloak); hosted
registries (Confluent Cloud, Aiven, Redpanda) ask for basic credentials. This gate asks for them
the way those do — 401 with ``WWW-Authenticate: Basic`` and a Confluent-style error body — and
passes every authenticated request, method, path, body and answer unchanged to the registry.

    python3 registry_auth_gate.py PORT UPSTREAM_URL CREDENTIALS_FILE

CREDENTIALS_FILE holds ``basic.auth.user.info=USER:PASSWORD`` (the client setting, so the same
file configures clients). Prints nothing; logs one line per refused request to stderr.
"""

from __future__ import annotations

import base64
import hmac
import http.client
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
    "authorization",
    "host",
    "content-length",
}


def read_user_info(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            key, _, value = line.strip().partition("=")
            if key == "basic.auth.user.info":
                return value
    raise SystemExit(f"registry_auth_gate: no basic.auth.user.info in {path}")


def make_handler(upstream: urllib.parse.SplitResult, expected: bytes):
    class Gate(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # only refusals are worth a line
            pass

        def _authorized(self) -> bool:
            scheme, _, token = self.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "basic":
                return False
            try:
                given = base64.b64decode(token.strip(), validate=True)
            except ValueError:
                return False
            return hmac.compare_digest(given, expected)

        def _forward(self):
            if not self._authorized():
                body = b'{"error_code":40101,"message":"Unauthorized"}'
                sys.stderr.write(f"registry_auth_gate: refused {self.command} {self.path}\n")
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="schema-registry"')
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
            try:
                conn.request(
                    self.command, upstream.path.rstrip("/") + self.path, body=body, headers=headers
                )
                answer = conn.getresponse()
                data = answer.read()
            finally:
                conn.close()
            self.send_response(answer.status, answer.reason)
            for key, value in answer.getheaders():
                if key.lower() not in HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

    return Gate


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write(__doc__ or "")
        return 2
    port, upstream, credentials = int(argv[0]), urllib.parse.urlsplit(argv[1]), argv[2]
    expected = read_user_info(credentials).encode("utf-8")
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(upstream, expected))
    server.daemon_threads = True
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
