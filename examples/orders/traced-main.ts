/**
 * The orders example with OpenTelemetry tracing: places order o-1002 on the in-memory broker and
 * prints its trace as a waterfall.
 *
 * Run it with `npm run example:traced`; `npm run example:traced -- --svg docs/images/trace.svg`
 * also draws the waterfall as an SVG (the picture in docs/telemetry.md). The trace shows the
 * command, the event it causes, the five subscriptions of that event (ChargePayment retried twice
 * after gateway timeouts, NotifyLegacyCrm dead-lettered after 3 attempts), the saga's steps and
 * the commands they send.
 *
 * A real application registers the SDK with an OTLP exporter instead (see docs/telemetry.md); here
 * the spans stay in memory so the program can print them.
 */
import { writeFileSync } from 'node:fs';
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { InMemorySagaStore } from '../../src/index.js';
import { harrierTracing } from '../../src/telemetry/index.js';
import { BusActivity } from './activity.js';
import { createOrdersBus } from './app.js';
import { PlaceOrder } from './messages.js';
import { ORDERS } from './sample-orders.js';
import { SimulatedLegacyCrm } from './services.js';
import { storyBusOptions } from './story.js';
import { renderTraceSvg, renderTraceText } from './trace-render.js';

const print = (line = ''): void => void process.stdout.write(`${line}\n`);
const svgPath = process.argv.includes('--svg') ? process.argv[process.argv.indexOf('--svg') + 1] : undefined;

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
const exporter = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

const bus = createOrdersBus({
  ...storyBusOptions(
    new BusActivity(() => undefined),
    new SimulatedLegacyCrm({ available: false }),
    new InMemorySagaStore(),
  ),
  // 'parent' keeps the whole conversation in one trace, which is what this picture shows.
  telemetry: harrierTracing({ tracerProvider, relation: 'parent' }),
});

/** Resolves once no span has ended for `quietMs` (the flow, its retries and the saga timeout are done). */
async function whenQuiet(quietMs: number, deadlineMs: number): Promise<void> {
  const started = Date.now();
  let count = -1;
  let since = Date.now();
  while (Date.now() - started < deadlineMs) {
    const now = exporter.getFinishedSpans().length;
    if (now !== count) {
      count = now;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) {
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`The flow did not settle within ${deadlineMs} ms`);
}

try {
  await bus.start();
  const order = ORDERS.find((o) => o.orderId === 'o-1002');
  if (order === undefined) throw new Error('sample order o-1002 is missing');
  await bus.send(PlaceOrder, order);
  // The saga's payment-due timeout fires 2 s after the order; wait past it.
  await whenQuiet(2_500, 15_000);
  const spans: ReadableSpan[] = exporter.getFinishedSpans();
  const traces = new Set(spans.map((s) => s.spanContext().traceId));
  print(`Trace of order o-1002: ${spans.length} spans in ${traces.size} trace(s)`);
  print();
  for (const line of renderTraceText(spans)) print(line);
  if (svgPath !== undefined) {
    writeFileSync(svgPath, renderTraceSvg(spans, 'Harrier orders example: order o-1002 (relation: parent)'));
    print();
    print(`Wrote ${svgPath}`);
  }
} catch (error) {
  print(`The example failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exitCode = 1;
} finally {
  await bus.stop({ gracePeriodMs: 2_000 });
  await tracerProvider.shutdown();
}
