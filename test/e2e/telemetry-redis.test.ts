/**
 * Tracing across processes on Redis (issue 14): the test process sends a command with its own
 * tracing SDK; worker A, a child process (fixtures/telemetry-worker.ts), handles it and publishes an
 * event; worker B, another child process on another endpoint, handles the event. Each worker writes
 * its finished spans as JSON lines, and the test follows the trace from the producer's `send` span
 * through both workers, once with `relation: 'parent'` and once with the default `'link'`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SpanKind, context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createBus, silentLogger, type MessageBus } from '../../src/index.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { harrierTracing, type HarrierTracingOptions } from '../../src/telemetry/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';
import { ShipOrder, type SpanLine, type WorkerRole } from './fixtures/telemetry-messages.js';

const redisUrl = inject('redisUrl');
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const WORKER_SCRIPT = fileURLToPath(new URL('./fixtures/telemetry-worker.ts', import.meta.url));
const SYSTEM = 'redis';
const ENDPOINT_A = 'telemetry-a';
const ENDPOINT_B = 'telemetry-b';
const CORRELATION_ID = '0190a0b0-0000-7000-8000-0000000000aa';

const contextManager = new AsyncLocalStorageContextManager();
const exporter = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
});
afterAll(async () => {
  context.disable();
  await tracerProvider.shutdown();
});

/** A telemetry-worker.ts process and the file its spans go to. */
interface Worker {
  readonly child: ChildProcess;
  readonly spansFile: string;
  output(): string;
}

/** Starts a worker process and waits until its bus has started. */
async function startWorker(settings: {
  readonly role: WorkerRole;
  readonly endpoint: string;
  readonly prefix: string;
  readonly spansFile: string;
  readonly relation: NonNullable<HarrierTracingOptions['relation']>;
}): Promise<Worker> {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER_SCRIPT], {
    cwd: ROOT,
    env: {
      ...process.env,
      REDIS_URL: redisUrl,
      HARRIER_PREFIX: settings.prefix,
      ROLE: settings.role,
      ENDPOINT: settings.endpoint,
      SPANS_FILE: settings.spansFile,
      RELATION: settings.relation,
      SYSTEM,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const keep = (chunk: Buffer): void => {
    output = (output + chunk.toString()).slice(-8_000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const worker: Worker = { child, spansFile: settings.spansFile, output: () => output };
  await waitFor(
    `the ${settings.role} worker to be ready`,
    () => output.includes('"ready":true') || child.exitCode !== null,
    { timeoutMs: 15_000, explain: () => output },
  );
  if (child.exitCode !== null) throw new Error(`The ${settings.role} worker exited:\n${output}`);
  return worker;
}

/** Stops a worker gracefully (SIGTERM), or with SIGKILL if it has not exited after 5 s. */
async function stopWorker({ child }: Worker): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  child.kill('SIGTERM');
  await exited;
  clearTimeout(timer);
}

function spanLines(file: string): SpanLine[] {
  if (!existsSync(file)) return [];
  const lines = readFileSync(file, 'utf8').split('\n');
  lines.pop(); // a line still being written waits for the next read
  return lines.map((line) => JSON.parse(line) as SpanLine);
}

/** What one run of the scenario left: the producer's send span and each worker's span lines. */
interface Trace {
  readonly commandId: string;
  readonly send: ReadableSpan;
  readonly shipper: readonly SpanLine[];
  readonly notifier: readonly SpanLine[];
}

/**
 * Starts both workers with `relation`, sends one command from this process and waits until worker
 * A has finished its process and publish spans and worker B its process span.
 */
function useTrace(relation: NonNullable<HarrierTracingOptions['relation']>): () => Trace {
  let trace: Trace | undefined;
  const prefix = freshPrefix();
  const dir = mkdtempSync(join(tmpdir(), 'harrier-telemetry-'));
  const workers: Worker[] = [];
  let producer: MessageBus | undefined;

  beforeAll(async () => {
    const started = await Promise.all([
      startWorker({
        role: 'shipper',
        endpoint: ENDPOINT_A,
        prefix,
        relation,
        spansFile: join(dir, 'a.jsonl'),
      }),
      startWorker({
        role: 'notifier',
        endpoint: ENDPOINT_B,
        prefix,
        relation,
        spansFile: join(dir, 'b.jsonl'),
      }),
    ]);
    workers.push(...started);
    const [a, b] = started;
    producer = createBus({
      endpoint: 'telemetry-producer',
      broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
      definitions: [ShipOrder],
      logger: silentLogger,
      telemetry: harrierTracing({ tracerProvider, relation, system: SYSTEM }),
    });
    exporter.reset();
    const commandId = await producer.send(ShipOrder, { orderId: 'o-1' }, { correlationId: CORRELATION_ID });
    await waitFor(
      'worker A to finish its process, create and send spans and worker B its process span',
      () => spanLines(a.spansFile).length >= 3 && spanLines(b.spansFile).length >= 1,
      { timeoutMs: 10_000, explain: () => `worker A:\n${a.output()}\nworker B:\n${b.output()}` },
    );
    const sends = exporter.getFinishedSpans().filter((s) => s.name === `send ${ShipOrder.type}`);
    expect(sends).toHaveLength(1);
    trace = {
      commandId,
      send: sends[0]!,
      shipper: spanLines(a.spansFile),
      notifier: spanLines(b.spansFile),
    };
  }, 30_000);

  afterAll(async () => {
    await Promise.all(workers.map(stopWorker));
    await producer?.stop();
    const redis = new Redis(redisUrl);
    await deleteKeys(redis, prefix);
    redis.disconnect();
    rmSync(dir, { recursive: true, force: true });
  });

  return () => {
    if (trace === undefined) throw new Error('The scenario did not run');
    return trace;
  };
}

function only(lines: readonly SpanLine[], name: string): SpanLine {
  const named = lines.filter((line) => line.name === name);
  expect(named, `spans named "${name}"`).toHaveLength(1);
  return named[0]!;
}

/** The three spans the workers finished, after checking each process finished only its own. */
function workerSpans(trace: Trace): {
  processA: SpanLine;
  publish: SpanLine;
  commit: SpanLine;
  processB: SpanLine;
} {
  expect(trace.shipper).toHaveLength(3);
  expect(trace.notifier).toHaveLength(1);
  const processA = only(trace.shipper, 'process telemetry.ShipOrder');
  // The handler's event: its creation (PRODUCER `create`), then the commit (CLIENT `send`).
  const publish = only(trace.shipper, 'create telemetry.OrderShipped');
  const commit = only(trace.shipper, 'send telemetry.OrderShipped');
  const processB = only(trace.notifier, 'process telemetry.OrderShipped');
  expect(new Set([process.pid, processA.pid, processB.pid]).size).toBe(3);
  expect(publish.pid).toBe(processA.pid);
  expect(commit).toMatchObject({ kind: SpanKind.CLIENT, parentSpanId: processA.spanId });
  expect(commit.links).toEqual([{ traceId: publish.traceId, spanId: publish.spanId }]);
  return { processA, publish, commit, processB };
}

describe('harrierTracing on Redis across processes', () => {
  describe("with relation: 'parent'", () => {
    const trace = useTrace('parent');

    it('continues one trace from the send span through worker A to worker B, each span the parent of the next', () => {
      const { send } = trace();
      const { processA, publish, processB } = workerSpans(trace());
      const sendId = send.spanContext().spanId;
      const traceId = send.spanContext().traceId;
      expect(send.kind).toBe(SpanKind.PRODUCER);
      expect(send.parentSpanContext).toBeUndefined();
      expect([processA, publish, processB].map((s) => s.traceId)).toEqual([traceId, traceId, traceId]);
      expect(processA).toMatchObject({ kind: SpanKind.CONSUMER, parentSpanId: sendId });
      expect(publish).toMatchObject({ kind: SpanKind.PRODUCER, parentSpanId: processA.spanId });
      expect(processB).toMatchObject({ kind: SpanKind.CONSUMER, parentSpanId: publish.spanId });
    });

    it('also links each process span to its producer span', () => {
      const { send } = trace();
      const { processA, publish, processB } = workerSpans(trace());
      const { traceId, spanId } = send.spanContext();
      expect(processA.links).toEqual([{ traceId, spanId }]);
      expect(processB.links).toEqual([{ traceId: publish.traceId, spanId: publish.spanId }]);
    });
  });

  describe("with the default relation, 'link'", () => {
    const trace = useTrace('link');

    it("starts a trace in each process span, linked to the other process's producer span", () => {
      const { send } = trace();
      const { processA, publish, processB } = workerSpans(trace());
      const { traceId, spanId } = send.spanContext();
      // A missing key in the JSON line: the span has no parent.
      expect(processA.kind).toBe(SpanKind.CONSUMER);
      expect(processA.parentSpanId).toBeUndefined();
      expect(processA.traceId).not.toBe(traceId);
      expect(processA.links).toEqual([{ traceId, spanId }]);
      expect(processB.kind).toBe(SpanKind.CONSUMER);
      expect(processB.parentSpanId).toBeUndefined();
      expect(processB.traceId).not.toBe(publish.traceId);
      expect(processB.links).toEqual([{ traceId: publish.traceId, spanId: publish.spanId }]);
    });

    it("makes the publish span a child of worker A's process span", () => {
      const { processA, publish } = workerSpans(trace());
      expect(publish).toMatchObject({
        kind: SpanKind.PRODUCER,
        traceId: processA.traceId,
        parentSpanId: processA.spanId,
      });
    });

    it('sets the messaging attributes on the spans of both workers', () => {
      const { commandId, send } = trace();
      const { processA, publish, processB } = workerSpans(trace());
      expect(send.attributes).toMatchObject({
        'messaging.system': SYSTEM,
        'messaging.destination.name': 'telemetry.ShipOrder',
        'messaging.operation.name': 'send',
        'messaging.operation.type': 'send',
        'messaging.message.id': commandId,
        'messaging.message.conversation_id': CORRELATION_ID,
      });
      expect(processA.attributes).toEqual({
        'messaging.system': SYSTEM,
        'messaging.destination.name': 'telemetry.ShipOrder',
        'messaging.operation.name': 'process',
        'messaging.operation.type': 'process',
        'messaging.message.id': commandId,
        'messaging.message.conversation_id': CORRELATION_ID,
        'messaging.consumer.group.name': ENDPOINT_A,
        'harrier.handler': 'ShipOrderHandler',
        'harrier.handler.kind': 'command',
        'harrier.attempt': 1,
      });
      const eventId = publish.attributes['messaging.message.id'];
      expect(eventId).toEqual(expect.any(String));
      expect(eventId).not.toBe(commandId);
      expect(publish.attributes).toEqual({
        'messaging.system': SYSTEM,
        'messaging.destination.name': 'telemetry.OrderShipped',
        'messaging.operation.name': 'create',
        'messaging.operation.type': 'create',
        'messaging.message.id': eventId,
        'messaging.message.conversation_id': CORRELATION_ID,
      });
      expect(processB.attributes).toEqual({
        'messaging.system': SYSTEM,
        'messaging.destination.name': 'telemetry.OrderShipped',
        'messaging.operation.name': 'process',
        'messaging.operation.type': 'process',
        'messaging.message.id': eventId,
        'messaging.message.conversation_id': CORRELATION_ID,
        'messaging.consumer.group.name': ENDPOINT_B,
        'harrier.handler': 'NotifyCustomer',
        'harrier.handler.kind': 'event',
        'harrier.attempt': 1,
      });
      for (const span of [processA, publish, processB]) {
        expect(span.status).toEqual({ code: 0 });
        expect(span.events).toEqual([]);
      }
    });
  });
});
