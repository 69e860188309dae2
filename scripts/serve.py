"""Serve the built book on 127.0.0.1 as a static host does: text compressed with gzip.

`make serve` runs it, and the browser checks (tests/book/conftest.py) serve the book with the
same handler, so the bytes they count are the bytes a reader's browser receives. Pages, styles
and scripts are sent gzip-compressed to a browser that accepts it (every browser does; so do
GitHub Pages and any web server configured for static sites), images and fonts as they are.

    python scripts/serve.py [--port 8000] [--directory _build/html]
"""

import argparse
import functools
import gzip
import http.server
import io
import os
import sys
from pathlib import Path
from typing import ClassVar

ROOT = Path(__file__).resolve().parent.parent
COMPRESSED = {".html", ".css", ".js", ".json", ".svg", ".txt", ".xml", ".inv", ".map"}


class BookHandler(http.server.SimpleHTTPRequestHandler):
    """Static files, text compressed with gzip when the client accepts it; no request log."""

    _cache: ClassVar[dict] = {}  # (path, mtime) -> compressed bytes

    def send_head(self):
        path = Path(self.translate_path(self.path))
        accepts = "gzip" in self.headers.get("Accept-Encoding", "")
        if not (accepts and path.is_file() and path.suffix in COMPRESSED):
            return super().send_head()
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns)
        if key not in self._cache:
            self._cache[key] = gzip.compress(path.read_bytes(), compresslevel=6, mtime=0)
        body = self._cache[key]
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Last-Modified", self.date_time_string(stat.st_mtime))
        self.end_headers()
        return io.BytesIO(body)

    def log_message(self, *args):
        pass


class BookServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return  # the browser left the page while a file was on its way: nothing to report
        super().handle_error(request, client_address)


def server(directory, port=0):
    """A threading server of `directory` on 127.0.0.1 (`port` 0: any free port)."""
    handler = functools.partial(BookHandler, directory=os.fspath(directory))
    return BookServer(("127.0.0.1", port), handler)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--directory", type=Path, default=ROOT / "_build" / "html")
    args = parser.parse_args()
    if not (args.directory / "index.html").is_file():
        print(f"no book in {args.directory}: run 'make book' first")
        return 1
    httpd = server(args.directory, args.port)
    print(f"Serving {args.directory} on http://127.0.0.1:{args.port}/ (Ctrl-C to stop)")
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
