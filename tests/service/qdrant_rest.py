"""A Qdrant REST server for tests, on a real socket on 127.0.0.1: the REST calls the server store makes, answered
by qdrant-client's local mode (the same API in-process), with their bodies parsed and their results written by
qdrant-client's own REST models, so a wrong shape fails. No Qdrant server binary can be had here.

Local mode has no payload indexes: this server keeps the ones created (`indexes`, {collection: {path: type}}) and
lists them in the collection's info as a server does, and `index_calls` counts the create and delete calls.
Aliases are local mode's: listed, changed in one call (all or none) and resolved on every collection's path, as a
server does; a collection deleted takes its aliases with it. Local mode is not safe to call from several threads
(a query racing a write fails inside it), so the calls are answered one at a time.

`hang()` makes it a server that accepts connections and reads requests but never answers, until `answer()`;
`delete_collection` drops the data as a server losing its volume would."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from metricsearch.service.process import free_port


class QdrantRest(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", free_port()), _Handler)
        self.local = QdrantClient(location=":memory:")
        self.answering = threading.Event()
        self.answering.set()
        self.held = 0
        self.calls = threading.Lock()
        self.indexes: dict[str, dict[str, str]] = {}
        self.index_calls = 0
        """Requests received while hanging (each holds its connection open, unanswered)."""
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def hang(self) -> None:
        self.answering.clear()

    def answer(self) -> None:
        self.answering.set()

    def __enter__(self) -> QdrantRest:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.answer()
        self.shutdown()
        self.server_close()
        self.local.close()


def _dump(result: object) -> object:
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json", exclude_none=True)
    if isinstance(result, list | tuple):
        return [_dump(r) for r in result]
    return result


class _Handler(BaseHTTPRequestHandler):
    server: QdrantRest
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        """Quiet."""

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if not self.server.answering.is_set():
            self.server.held += 1
            self.server.answering.wait()
            self.close_connection = True  # the client gave up on it long ago
            return
        try:
            with self.server.calls:
                result = self._route(method, url.path, json.loads(body) if body else {}, parse_qs(url.query))
        except KeyError as e:
            return self._send(404, {"status": {"error": f"Not found: {e}"}, "time": 0})
        except FileExistsError as e:
            return self._send(409, {"status": {"error": str(e)}, "time": 0})
        except ValueError as e:
            return self._send(400, {"status": {"error": str(e)}, "time": 0})
        self._send(200, {"result": _dump(result), "status": "ok", "time": 0.001})

    def _route(self, method: str, path: str, body: dict, query: dict) -> object:
        local = self.server.local
        if path == "/aliases" and method == "GET":
            return local.get_aliases()
        if path == "/collections/aliases" and method == "POST":
            return local.update_collection_aliases(qm.ChangeAliasesOperation.model_validate(body).actions)
        if path == "/collections" and method == "GET":
            return local.get_collections()
        match = re.fullmatch(r"/collections/([\w.-]+)(/.*)?", path)
        if match is None:
            raise KeyError(path)
        rest = match[2] or ""
        if rest == "" and method == "PUT":
            if local.collection_exists(match[1]):
                raise FileExistsError(f"Collection `{match[1]}` already exists!")
            create = qm.CreateCollection.model_validate(body)
            return local.create_collection(
                match[1],
                vectors_config=create.vectors,
                sparse_vectors_config=create.sparse_vectors,
                metadata=create.metadata,
            )
        name = {a.alias_name: a.collection_name for a in local.get_aliases().aliases}.get(match[1], match[1])
        if rest == "/exists":
            return {"exists": local.collection_exists(name)}
        if not local.collection_exists(name):
            raise KeyError(f"Collection `{name}` doesn't exist!")
        if rest == "" and method == "DELETE":
            self.server.indexes.pop(name, None)
            return local.delete_collection(name)
        if rest == "/aliases" and method == "GET":
            return local.get_collection_aliases(name)
        if rest == "" and method == "GET":
            info = local.get_collection(name)
            schema = self.server.indexes.get(name, {})
            info.payload_schema = {
                path: qm.PayloadIndexInfo(data_type=qm.PayloadSchemaType(t), points=0) for path, t in schema.items()
            }
            return info
        if rest == "/index" and method == "PUT":
            create = qm.CreateFieldIndex.model_validate(body)
            kind = qm.PayloadSchemaType(create.field_schema).value
            self.server.indexes.setdefault(name, {})[create.field_name] = kind
            self.server.index_calls += 1
            return qm.UpdateResult(operation_id=0, status=qm.UpdateStatus.COMPLETED)
        if rest.startswith("/index/") and method == "DELETE":
            del self.server.indexes.get(name, {})[rest.removeprefix("/index/")]
            self.server.index_calls += 1
            return qm.UpdateResult(operation_id=0, status=qm.UpdateStatus.COMPLETED)
        if rest == "/points" and method == "PUT":
            return local.upsert(name, points=qm.PointsList.model_validate(body).points)
        if rest == "/points" and method == "POST":
            request = qm.PointRequest.model_validate(body)
            return local.retrieve(
                name, ids=request.ids, with_payload=request.with_payload, with_vectors=request.with_vector
            )
        if rest == "/points/delete":
            return local.delete(name, points_selector=qm.PointIdsList.model_validate(body))
        if rest == "/points/count":
            request = qm.CountRequest.model_validate(body)
            return local.count(name, count_filter=request.filter, exact=True)
        if rest == "/points/scroll":
            request = qm.ScrollRequest.model_validate(body)
            points, offset = local.scroll(
                name,
                scroll_filter=request.filter,
                limit=request.limit,
                offset=request.offset,
                with_payload=request.with_payload,
                with_vectors=request.with_vector,
            )
            return qm.ScrollResult(points=points, next_page_offset=offset)
        if rest == "/points/query":
            return self._query(name, qm.QueryRequest.model_validate(body))
        if rest == "/points/query/batch":
            return [self._query(name, r) for r in qm.QueryRequestBatch.model_validate(body).searches]
        raise KeyError(f"{method} {path}")

    def _query(self, name: str, request: qm.QueryRequest) -> qm.QueryResponse:
        return self.server.local.query_points(
            name,
            query=request.query,
            using=request.using,
            prefetch=request.prefetch,
            query_filter=request.filter,
            limit=request.limit or 10,
            with_payload=request.with_payload if request.with_payload is not None else False,
            with_vectors=request.with_vector if request.with_vector is not None else False,
        )

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
