/**
 * Draws finished spans as a waterfall: text lines for the terminal, an SVG for the docs.
 */
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';

/** A span in waterfall order: its depth in the tree and its start and end in ms from the first. */
interface Row {
  readonly span: ReadableSpan;
  readonly depth: number;
  readonly startMs: number;
  readonly endMs: number;
}

const KIND = {
  [SpanKind.INTERNAL]: 'INTERNAL',
  [SpanKind.SERVER]: 'SERVER',
  [SpanKind.CLIENT]: 'CLIENT',
  [SpanKind.PRODUCER]: 'PRODUCER',
  [SpanKind.CONSUMER]: 'CONSUMER',
} as const;

const COLOUR = {
  [SpanKind.INTERNAL]: '#9e9e9e',
  [SpanKind.SERVER]: '#7e57c2',
  [SpanKind.CLIENT]: '#26a69a',
  [SpanKind.PRODUCER]: '#42a5f5',
  [SpanKind.CONSUMER]: '#66bb6a',
} as const;

function ms(time: readonly [number, number]): number {
  return time[0] * 1_000 + time[1] / 1e6;
}

/** Depth-first by start time, children under their parent. */
function rows(spans: readonly ReadableSpan[]): Row[] {
  const origin = Math.min(...spans.map((s) => ms(s.startTime)));
  const ids = new Set(spans.map((s) => s.spanContext().spanId));
  const children = new Map<string | undefined, ReadableSpan[]>();
  for (const span of spans) {
    const parent = span.parentSpanContext?.spanId;
    const key = parent !== undefined && ids.has(parent) ? parent : undefined;
    const list = children.get(key) ?? [];
    list.push(span);
    children.set(key, list);
  }
  const out: Row[] = [];
  const visit = (parent: string | undefined, depth: number): void => {
    const list = (children.get(parent) ?? []).sort((a, b) => ms(a.startTime) - ms(b.startTime));
    for (const span of list) {
      out.push({ span, depth, startMs: ms(span.startTime) - origin, endMs: ms(span.endTime) - origin });
      visit(span.spanContext().spanId, depth + 1);
    }
  };
  visit(undefined, 0);
  return out;
}

/** The span's name with its handler and attempt, as the waterfall labels it. */
function label(span: ReadableSpan): string {
  const handler = span.attributes['harrier.handler'];
  const attempt = span.attributes['harrier.attempt'];
  const origin = span.attributes['harrier.origin'];
  return [
    span.name,
    handler !== undefined ? `[${String(handler)}]` : '',
    attempt !== undefined ? `#${String(attempt)}` : '',
    origin !== undefined ? `(${String(origin)})` : '',
  ]
    .filter((part) => part !== '')
    .join(' ');
}

/** What happened on the span: its error type and events other than the recorded exception. */
function notes(span: ReadableSpan): string {
  const parts: string[] = [];
  const error = span.attributes['error.type'];
  if (span.status.code === SpanStatusCode.ERROR && error !== undefined) parts.push(`error ${String(error)}`);
  for (const event of span.events) {
    if (event.name === 'exception') continue;
    const reason = event.attributes?.['harrier.dead_letter.reason'];
    const delay = event.attributes?.['harrier.retry.delay_ms'];
    parts.push(
      `${event.name}${reason !== undefined ? ` (${String(reason)})` : ''}${delay !== undefined ? ` (in ${String(delay)} ms)` : ''}`,
    );
  }
  return parts.join(', ');
}

/** The waterfall as text lines: start, duration, kind, the tree of names, what happened. */
export function renderTraceText(spans: readonly ReadableSpan[]): string[] {
  return rows(spans).map(({ span, depth, startMs, endMs }) => {
    const timing = `${startMs.toFixed(1).padStart(8)} ms ${(endMs - startMs).toFixed(1).padStart(6)} ms`;
    const note = notes(span);
    return `${timing}  ${KIND[span.kind].padEnd(8)}  ${'  '.repeat(depth)}${label(span)}${note !== '' ? `  -- ${note}` : ''}`;
  });
}

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** The waterfall as an SVG: one row per span, a bar on a time axis, events as marks. */
export function renderTraceSvg(spans: readonly ReadableSpan[], title: string): string {
  const all = rows(spans);
  const rowHeight = 22;
  const labelWidth = 520;
  const chartWidth = 560;
  const top = 56;
  const width = labelWidth + chartWidth + 40;
  const height = top + all.length * rowHeight + 40;
  const total = Math.max(1, ...all.map((r) => r.endMs));
  const x = (t: number): number => labelWidth + (t / total) * chartWidth;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="ui-monospace, Menlo, Consolas, monospace" font-size="12">`,
    `<rect width="100%" height="100%" fill="#ffffff"/>`,
    `<text x="12" y="22" font-size="15" font-weight="bold">${escape(title)}</text>`,
    `<text x="12" y="42" fill="#555">${all.length} spans, ${total.toFixed(0)} ms; blue PRODUCER, green CONSUMER, teal CLIENT; red outline: error; ◆ retry scheduled, ✖ dead-lettered</text>`,
  ];
  for (let tick = 0; tick <= 4; tick++) {
    const t = (total * tick) / 4;
    out.push(
      `<line x1="${x(t)}" y1="${top - 6}" x2="${x(t)}" y2="${height - 30}" stroke="#e0e0e0"/>`,
      `<text x="${x(t)}" y="${height - 14}" text-anchor="middle" fill="#555">${t.toFixed(0)} ms</text>`,
    );
  }
  all.forEach(({ span, depth, startMs, endMs }, i) => {
    const y = top + i * rowHeight;
    const failed = span.status.code === SpanStatusCode.ERROR;
    const barWidth = Math.max(2, x(endMs) - x(startMs));
    out.push(
      `<text x="${12 + depth * 14}" y="${y + 14}">${escape(label(span))}</text>`,
      `<rect x="${x(startMs)}" y="${y + 4}" width="${barWidth}" height="13" rx="2" fill="${COLOUR[span.kind]}"${failed ? ' stroke="#e53935" stroke-width="2"' : ''}/>`,
    );
    for (const event of span.events) {
      const mark =
        event.name === 'harrier.retry_scheduled'
          ? '◆'
          : event.name === 'harrier.dead_lettered'
            ? '✖'
            : undefined;
      if (mark === undefined) continue;
      out.push(
        `<text x="${x(endMs) + 4}" y="${y + 15}" fill="${mark === '✖' ? '#e53935' : '#fb8c00'}">${mark}</text>`,
      );
    }
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
