import { subscriptionDeadLetters } from '../admin/subscription-dead-letters.js';
import type { SubscriptionTopology, Topology } from '../admin/topology.js';
import type { QueueDepth } from '../broker/message-broker.js';
import { sumQueueDepths } from '../broker/sum-queue-depths.js';
import type { DeadLetterStore } from '../dead-letters/dead-letter-store.js';
import type { CheckpointLag } from '../projections/projection-lag.js';
import { escapeHtml as h, isoTime, maskSecrets } from './dashboard-html.js';
import { listHref } from './dashboard-query.js';

/** A page's status and escaped body. */
export interface InsightPage {
  readonly status: number;
  readonly body: string;
}

const DEPTHS = ['waiting', 'active', 'delayed'] as const;

/**
 * The body of a page whose source was not given: 200, since the dashboard works as configured.
 * `call` is the `RedisAdmin` method that reads what the page shows.
 */
function notConfigured(title: string, option: string, call: string): InsightPage {
  const example = `import { openRedisAdmin } from 'harrier/redis';\nconst admin = await openRedisAdmin(redisUrl, { prefix });\ncreateDashboard({ deadLetters, ${option}: () => admin.${call}() });`;
  return {
    status: 200,
    body: [
      `<h1>${h(title)}</h1>`,
      `<p data-testid="not-configured">This dashboard was started without a ${h(option)} source. Pass <code>${h(option)}</code> to <code>createDashboard</code> to see it here, for example:</p>`,
      `<pre>${h(example)}</pre>`,
      '<p class="muted"><code>harrier dashboard</code> passes it, read from the system its URL names.</p>',
    ].join('\n'),
  };
}

/**
 * Runs a page's source, or renders what it read; a failure becomes a 500 page naming the source,
 * secrets masked. Rendering counts as the source's: it fails only on values of the wrong shape.
 */
async function fromSource<T>(
  what: string,
  source: () => T | Promise<T>,
): Promise<{ readonly value: T } | { readonly failed: InsightPage }> {
  try {
    return { value: await source() };
  } catch (error) {
    const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    return {
      failed: {
        status: 500,
        body: `<h1>The ${h(what)} source failed</h1><p class="error" role="alert" data-testid="source-failed">${h(maskSecrets(text))}</p><p class="muted">Reload the page to try again.</p>`,
      },
    };
  }
}

function depths(d: QueueDepth): string {
  return DEPTHS.map((state) => `<td class="num">${h(String(d[state]))}</td>`).join('');
}

/** A subscription with the dead letters the store holds for it. */
interface SubscriptionView {
  readonly endpoint: string;
  readonly topology: SubscriptionTopology;
  readonly deadLetters: number;
}

/** The dead-letter count of a subscription: red, and a link to its records, when there are any. */
function deadLettersCell(view: SubscriptionView, rowspan: string): string {
  const text = h(String(view.deadLetters));
  // A link to an empty list would only be a click to nowhere.
  if (view.deadLetters === 0) return `<td class="num"${rowspan}>${text}</td>`;
  const href = listHref(
    new Map([
      ['endpoint', view.endpoint],
      ['handler', view.topology.subscription.handler],
    ]),
  );
  return `<td class="num failed"${rowspan}><a href="${h(href)}" data-testid="subscription-dead-letters">${text}</a></td>`;
}

function subscriptionRows(view: SubscriptionView): string[] {
  const s = view.topology;
  const spec = s.subscription;
  const span = Math.max(1, s.queues.length + (s.queues.length > 1 ? 1 : 0));
  const rowspan = span > 1 ? ` rowspan="${span}"` : '';
  const ordered = spec.orderedTypes ?? [];
  const about = [
    `<td${rowspan}>${h(spec.handler)}</td>`,
    `<td${rowspan}>${h(spec.kind)}</td>`,
    `<td${rowspan}>${spec.types.map((t) => `<code>${h(t)}</code>`).join('<br>') || '-'}</td>`,
    `<td${rowspan}>${ordered.map((t) => `<code>${h(t)}</code>`).join('<br>') || '-'}</td>`,
  ].join('');
  const dead = deadLettersCell(view, rowspan);
  const cls = (extra = ''): string => {
    const names = [extra, view.deadLetters > 0 ? 'failed' : ''].filter((n) => n !== '').join(' ');
    return names === '' ? '' : ` class="${names}"`;
  };
  if (s.queues.length === 0) {
    return [`<tr${cls()}>${about}<td class="muted">no queue</td>${depths(s.total)}${dead}</tr>`];
  }
  const rows = s.queues.map(
    (q, i) =>
      `<tr${cls()}>${i === 0 ? about : ''}<td><code>${h(q.queue)}</code></td>${depths(q)}${i === 0 ? dead : ''}</tr>`,
  );
  if (s.queues.length > 1) rows.push(`<tr${cls('total')}><td>total</td>${depths(s.total)}</tr>`);
  return rows;
}

const COUNT_HEADS = '<th>Waiting</th><th>Active</th><th>Delayed</th><th>Dead letters</th>';

/**
 * The topology page: each endpoint, its subscriptions, their queues' depths and the dead letters
 * the store holds for each subscription.
 */
export function topologyBody(topology: Topology, views: readonly SubscriptionView[]): string {
  const parts = ['<h1>Topology</h1>'];
  const total = sumQueueDepths(
    '',
    views.map((v) => v.topology.total),
  );
  const deadLetters = views.reduce((n, v) => n + v.deadLetters, 0);
  parts.push(
    `<table data-testid="topology-total"><thead><tr><th>Endpoints</th><th>Subscriptions</th>${COUNT_HEADS}</tr></thead><tbody><tr${deadLetters > 0 ? ' class="failed"' : ''}><td class="num">${h(String(topology.endpoints.length))}</td><td class="num">${h(String(views.length))}</td>${depths(total)}<td class="num${deadLetters > 0 ? ' failed' : ''}">${h(String(deadLetters))}</td></tr></tbody></table>`,
  );
  if (topology.note !== undefined) {
    // What the backend could not tell (RabbitMQ: no unacknowledged counts over AMQP).
    parts.push(`<p class="muted" data-testid="topology-note">Note: ${h(topology.note)}</p>`);
  }
  for (const name of topology.unreadable ?? []) {
    parts.push(
      `<p class="error" role="alert">Endpoint <code>${h(name)}</code>: its registration could not be read (something other than a Harrier broker wrote it); skipped.</p>`,
    );
  }
  if (topology.endpoints.length === 0) {
    parts.push(
      '<p data-testid="no-endpoints">No endpoint has registered yet: an endpoint registers its subscriptions when its bus starts.</p>',
    );
  }
  for (const e of topology.endpoints) {
    const rows = views.filter((v) => v.endpoint === e.endpoint).flatMap(subscriptionRows);
    const table =
      rows.length === 0
        ? '<p class="muted">No subscriptions.</p>'
        : `<table data-testid="subscriptions"><thead><tr><th>Handler</th><th>Kind</th><th>Types</th><th>Ordered types</th><th>Queue</th>${COUNT_HEADS}</tr></thead><tbody>\n${rows.join('\n')}\n</tbody></table>`;
    parts.push(
      `<section class="insight" data-testid="endpoint" data-endpoint="${h(e.endpoint)}"><h2>${h(e.endpoint)} <span class="muted">registered ${h(isoTime(e.registeredAt))}</span></h2>\n${table}</section>`,
    );
  }
  return parts.join('\n');
}

/** One projection's rows and the facts the page sums from them. */
interface ProjectionView {
  readonly name: string;
  readonly rows: readonly CheckpointLag[];
  readonly deadLetters: number;
}

function projectionStatus(rows: readonly CheckpointLag[]): string {
  if (rows.every((r) => r.checkpoint === undefined)) {
    return '<span class="status none">no checkpoint yet</span>';
  }
  const lag = rows.reduce((n, r) => n + r.lag, 0);
  return lag === 0
    ? '<span class="status ok">caught up</span>'
    : `<span class="status behind">behind by ${h(String(lag))}</span>`;
}

function lastUpdate(rows: readonly CheckpointLag[]): number | undefined {
  const times = rows.flatMap((r) => (r.updatedAt === undefined ? [] : [r.updatedAt]));
  return times.length === 0 ? undefined : Math.max(...times);
}

function deadLettersLink(view: ProjectionView): string {
  const text = `${h(String(view.deadLetters))} dead letter${view.deadLetters === 1 ? '' : 's'}`;
  // A link to an empty list would only be a click to nowhere.
  if (view.deadLetters === 0) return `<span class="muted">${text}</span>`;
  const href = listHref(new Map([['handler', view.name]]));
  return `<a href="${h(href)}" data-testid="projection-dead-letters">${text}</a>`;
}

/** The projections page: a summary row per projection, then its partitions. */
export function projectionsBody(views: readonly ProjectionView[]): string {
  const parts = ['<h1>Projections</h1>'];
  if (views.length === 0) {
    parts.push(
      '<p data-testid="no-projections">No projection has a checkpoint yet: a projection saves its first one after it handles its first events.</p>',
    );
    return parts.join('\n');
  }
  const summary = views.map(
    (v) =>
      `<tr><td><a href="#${h(encodeURIComponent(v.name))}">${h(v.name)}</a></td><td>${projectionStatus(v.rows)}</td><td class="num">${h(String(v.rows.reduce((n, r) => n + r.lag, 0)))}</td><td class="when">${h(isoTime(lastUpdate(v.rows)))}</td><td${v.deadLetters > 0 ? ' class="failed"' : ''}>${deadLettersLink(v)}</td></tr>`,
  );
  parts.push(
    `<table data-testid="projections"><thead><tr><th>Projection</th><th>Status</th><th>Lag</th><th>Last update</th><th>Dead letters</th></tr></thead><tbody>\n${summary.join('\n')}\n</tbody></table>`,
  );
  for (const v of views) {
    const rows = v.rows.map(
      (r) =>
        `<tr><td><code>${h(r.topic)}</code></td><td class="num">${h(String(r.partition))}</td><td class="num">${h(String(r.checkpoint ?? '-'))}</td><td class="num">${h(String(r.endOffset))}</td><td class="num">${h(String(r.lag))}</td><td class="when">${h(isoTime(r.updatedAt))}</td></tr>`,
    );
    parts.push(
      `<section class="insight" data-testid="projection" data-projection="${h(v.name)}"><h2 id="${h(encodeURIComponent(v.name))}">${h(v.name)} ${projectionStatus(v.rows)}</h2>\n<table data-testid="partitions"><thead><tr><th>Topic</th><th>Partition</th><th>Checkpoint</th><th>End offset</th><th>Lag</th><th>Last update</th></tr></thead><tbody>\n${rows.join('\n')}\n</tbody></table></section>`,
    );
  }
  return parts.join('\n');
}

/**
 * Renders `GET /topology` from its source, or says how to give one; each subscription's dead
 * letters are counted in `store`.
 */
export async function topologyPage(
  source: (() => Promise<Topology>) | undefined,
  store: DeadLetterStore,
): Promise<InsightPage> {
  if (source === undefined) {
    return notConfigured('Topology', 'topology', 'topology');
  }
  const read = await fromSource('topology', async () => {
    const topology = await source();
    const subscriptions = topology.endpoints.flatMap((e) =>
      e.subscriptions.map((s) => ({ endpoint: e.endpoint, topology: s })),
    );
    return { topology, subscriptions };
  });
  if ('failed' in read) return read.failed;
  const { topology, subscriptions } = read.value;
  // Counted side by side, as the projections page counts its dead letters.
  const counts = await Promise.all(
    subscriptions.map((s) => subscriptionDeadLetters(store, s.endpoint, s.topology.subscription)),
  );
  const views = subscriptions.map((s, i) => ({ ...s, deadLetters: counts[i] ?? 0 }));
  const body = await fromSource('topology', () => topologyBody(topology, views));
  return 'failed' in body ? body.failed : { status: 200, body: body.value };
}

/**
 * Renders `GET /projections` from its source, or says how to give one; each projection's dead
 * letters are counted in `store`.
 *
 * @remarks
 * A projection runner dead-letters an event it cannot handle with the projection's name as the
 * record's `handler` (reason `projection-failed`, or why the event could not be read), so the
 * count and its link filter by `handler`.
 */
export async function projectionsPage(
  source: (() => Promise<readonly CheckpointLag[]>) | undefined,
  store: DeadLetterStore,
): Promise<InsightPage> {
  if (source === undefined) {
    return notConfigured('Projections', 'projections', 'projectionLags');
  }
  const read = await fromSource('projections', async () => {
    const byName = new Map<string, CheckpointLag[]>();
    for (const row of await source())
      byName.set(row.projection, [...(byName.get(row.projection) ?? []), row]);
    return byName;
  });
  if ('failed' in read) return read.failed;
  const byName = read.value;
  const names = [...byName.keys()].sort();
  // Counted side by side: a store without a handler index reads its records once per count.
  const deadLetters = await Promise.all(names.map((handler) => store.count({ handler })));
  const views = names.map((name, i) => ({
    name,
    rows: byName.get(name) ?? [],
    deadLetters: deadLetters[i] ?? 0,
  }));
  const body = await fromSource('projections', () => projectionsBody(views));
  return 'failed' in body ? body.failed : { status: 200, body: body.value };
}
