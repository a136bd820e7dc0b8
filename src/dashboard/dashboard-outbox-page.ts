import type { OutboxAdmin, ParkedOutboxPage } from '../admin/outbox-admin.js';
import { CSRF_FIELD } from './dashboard-csrf.js';
import { escapeHtml as h, isoTime, maskSecrets } from './dashboard-html.js';

/** Rows of parked outbox rows shown on one page of `GET /outbox`. */
export const OUTBOX_PAGE_SIZE = 50;

/** A page's status and escaped body. */
export interface OutboxPage {
  readonly status: number;
  readonly body: string;
}

const NOT_CONFIGURED = `import { PostgresOutboxAdmin } from 'harrier/postgres';
createDashboard({ deadLetters, outbox: new PostgresOutboxAdmin({ connection: process.env.DATABASE_URL, schema }) });`;

function hidden(name: string, value: string): string {
  return `<input type="hidden" name="${h(name)}" value="${h(value)}">`;
}

function table(page: ParkedOutboxPage, csrf: string | undefined): string {
  const header = [
    'Id',
    'Parked',
    'Type',
    'Key',
    'Lane',
    'Tries',
    'Error',
    ...(csrf !== undefined ? [''] : []),
  ];
  const rows = page.rows.map((row) => {
    const error =
      row.reason === 'malformed' ? `malformed: ${row.error}` : `${row.errorCode ?? 'error'}: ${row.error}`;
    const replay =
      csrf === undefined
        ? ''
        : `<td><form class="actions" method="post" action="/actions/outbox-replay">${hidden(CSRF_FIELD, csrf)}${hidden('id', row.id)}<button type="submit" data-action="outbox-replay">Replay</button></form></td>`;
    return `<tr data-parked="${h(row.id)}"><td>${h(row.id)}</td><td class="when">${h(isoTime(row.parkedAt))}</td><td>${h(row.type)}</td><td>${h(row.partitionKey ?? '-')}</td><td class="num">${h(String(row.lane))}</td><td class="num">${h(String(row.attempts))}</td><td>${h(error)}</td>${replay}</tr>`;
  });
  return `<table data-testid="parked-outbox"><thead><tr>${header.map((c) => `<th>${h(c)}</th>`).join('')}</tr></thead><tbody>${rows.join('')}</tbody></table>`;
}

/**
 * `GET /outbox`: the outbox rows the relay parked, oldest parked first, each with a replay button
 * when the dashboard allows actions (`csrf` given).
 *
 * @param replayed - how many rows the replay that led here moved back, to say so.
 */
export async function outboxPage(
  outbox: OutboxAdmin | undefined,
  cursor: string | undefined,
  csrf: string | undefined,
  replayed: number | undefined,
): Promise<OutboxPage> {
  if (outbox === undefined) {
    return {
      status: 200,
      body: [
        '<h1>Parked outbox rows</h1>',
        '<p data-testid="not-configured">This dashboard was started without an outbox source. Pass <code>outbox</code> to <code>createDashboard</code> to see the rows the outbox relay parked, for example:</p>',
        `<pre>${h(NOT_CONFIGURED)}</pre>`,
      ].join('\n'),
    };
  }
  let page: ParkedOutboxPage;
  let total: number;
  try {
    [page, total] = await Promise.all([
      outbox.listParked({ limit: OUTBOX_PAGE_SIZE, ...(cursor !== undefined ? { cursor } : {}) }),
      outbox.countParked(),
    ]);
  } catch (error) {
    const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    return {
      status: 500,
      body: `<h1>The outbox source failed</h1><p class="error" role="alert" data-testid="source-failed">${h(maskSecrets(text))}</p><p class="muted">Reload the page to try again.</p>`,
    };
  }
  const notice =
    replayed === undefined
      ? ''
      : `<p role="status" data-testid="outbox-replayed">Moved ${replayed} parked row${replayed === 1 ? '' : 's'} back into the outbox: the relay publishes ${replayed === 1 ? 'it' : 'them'} again.</p>`;
  const intro = `<p class="muted">Rows the outbox relay could not publish after its tries (maxAttempts), or malformed; the rows behind them in their lane went on. Replay moves a row back to the end of its lane with its tries reset. <code>harrier postgres outbox</code> does the same from a shell.</p>`;
  if (page.rows.length === 0) {
    return {
      status: 200,
      body: `<h1>Parked outbox rows</h1>${notice}${intro}<p data-testid="outbox-empty">No parked outbox rows.</p>`,
    };
  }
  const paging =
    page.next === undefined
      ? ''
      : `<nav class="paging"><a href="/outbox?cursor=${h(encodeURIComponent(page.next))}">Next page</a></nav>`;
  return {
    status: 200,
    body: `<h1>Parked outbox rows <span class="muted">(${h(String(total))})</span></h1>${notice}${intro}${table(page, csrf)}${paging}`,
  };
}
