/**
 * A stand-in OTLP/HTTP trace receiver for the telemetry benches, run as a child process so its work
 * is not counted in the bench's CPU time: it accepts `POST /v1/traces` (JSON, gzip or not), counts
 * requests, body bytes and spans, and answers as a collector does; `GET /stats` returns the counts so
 * far as JSON. On start it prints `{"port":<port>}` on stdout.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { gunzipSync } from 'node:zlib';

interface TraceRequest {
  readonly resourceSpans?: readonly {
    readonly scopeSpans?: readonly { readonly spans?: readonly unknown[] }[];
  }[];
}

const stats = { requests: 0, bytes: 0, spans: 0, malformed: 0 };

function spansIn(body: Buffer, encoding: string | undefined): number {
  const text = (encoding === 'gzip' ? gunzipSync(body) : body).toString('utf8');
  const request = JSON.parse(text) as TraceRequest;
  let spans = 0;
  for (const resource of request.resourceSpans ?? []) {
    for (const scope of resource.scopeSpans ?? []) spans += scope.spans?.length ?? 0;
  }
  return spans;
}

function receive(request: IncomingMessage, response: ServerResponse): void {
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  request.on('end', () => {
    if (request.method === 'GET' && request.url === '/stats') {
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(stats));
      return;
    }
    if (request.method !== 'POST' || request.url !== '/v1/traces') {
      response.writeHead(404).end();
      return;
    }
    const body = Buffer.concat(chunks);
    stats.requests++;
    stats.bytes += body.length;
    try {
      stats.spans += spansIn(body, request.headers['content-encoding']);
    } catch {
      // Counted, not fatal: the bench reports it, and a span count that falls short fails the run.
      stats.malformed++;
    }
    // An empty ExportTraceServiceResponse: everything accepted.
    response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
}

const server = createServer(receive);
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  process.stdout.write(`${JSON.stringify({ port })}\n`);
});
// The bench closes stdin when it is done; the sink then exits with it.
process.stdin.resume();
process.stdin.on('end', () => {
  server.close();
  process.exit(0);
});
