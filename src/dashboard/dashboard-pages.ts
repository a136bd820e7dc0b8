import type {
  DeadLetterGroupPage,
  DeadLetterPage,
  DeadLetterRecord,
  ReplayRecord,
} from '../dead-letters/dead-letter-store.js';
import { deadLetterVersion } from '../dead-letters/dead-letter-version.js';
import { replayOutcome } from '../dead-letters/replay-outcome.js';
import {
  ACTIONS_HEADER,
  SELECT_HEADER,
  groupActions,
  groupsFooter,
  listActions,
  recordActions,
  selectCell,
  type ActionView,
} from './dashboard-action-html.js';
import type { MatchCount } from './dashboard-count.js';
import { escapeHtml as h, isoTime, maskSecrets } from './dashboard-html.js';
import { TEXT_FILTERS, listHref, pageHref, type ListQuery } from './dashboard-query.js';

const MESSAGE_PREVIEW = 160;

function recordHref(id: string): string {
  return `/records/${encodeURIComponent(id)}`;
}

function preview(text: string): string {
  return text.length > MESSAGE_PREVIEW ? `${text.slice(0, MESSAGE_PREVIEW)}…` : text;
}

function field(label: string, name: string, query: ListQuery, placeholder = ''): string {
  const value = query.params.get(name) ?? '';
  return `<label>${h(label)}<input name="${name}" value="${h(value)}" placeholder="${h(placeholder)}"></label>`;
}

function filterForm(query: ListQuery, action: '/' | '/groups' = '/'): string {
  const status = query.params.get('status') ?? 'dead';
  const options = ['dead', 'replayed', 'any']
    .map((s) => `<option${s === status ? ' selected' : ''}>${s}</option>`)
    .join('');
  const texts = TEXT_FILTERS.map((name) => field(name, name, query)).join('');
  const searchBox = `<label>search<input type="search" name="text" value="${h(query.params.get('text') ?? '')}" placeholder="error or payload text"></label>`;
  return `<form class="filters" method="get" action="${action}">${searchBox}${texts}${field('since', 'since', query, '1h or 2026-01-31T12:00Z')}${field('until', 'until', query, '15m or 2026-02-01')}<label>status<select name="status">${options}</select></label><button type="submit">Filter</button><a href="${action}">Clear</a></form>`;
}

/**
 * The dead-letter list: the filter form, problems or the page of records, and paging links; with
 * `actions`, a checkbox per record and the form that replays or purges the checked ones.
 */
export function listBody(
  query: ListQuery,
  result: { readonly page: DeadLetterPage; readonly total: MatchCount } | undefined,
  actions?: ActionView,
): string {
  const parts = [`<h1>Dead letters</h1>`, filterForm(query)];
  if (result === undefined) {
    parts.push(...query.problems.map((p) => `<p class="error" role="alert">${h(p)}</p>`));
    return parts.join('\n');
  }
  const { page, total } = result;
  parts.push(
    total.complete
      ? `<p class="muted" data-testid="total">${total.n} matching</p>`
      : `<p class="muted" data-testid="total">${total.n}+ matching (a search stops counting there; page on to search further)</p>`,
  );
  // A text search may end a page early, even empty, and still have more to read.
  const short = page.next !== undefined && page.records.length < query.limit;
  if (page.records.length === 0) {
    parts.push(
      short ? '<p>None found yet; the search has more to read.</p>' : '<p>No dead letters match.</p>',
    );
  } else {
    const select = actions === undefined ? () => '' : selectCell;
    const rows = page.records.map(
      (r) =>
        `<tr>${select(r.id)}<td class="when"><a href="${h(recordHref(r.id))}">${h(isoTime(r.lastFailedAt))}</a></td><td>${h(r.type ?? '-')}</td><td class="num">${versionText(r)}</td><td>${h(r.endpoint)}</td><td>${h(r.handler ?? '-')}</td><td>${h(r.reason)}</td><td>${h(preview(`${r.error.name}: ${maskSecrets(r.error.message)}`))}</td><td class="num">${r.attemptCount}</td><td><a href="${h(listHref(new Map([['fingerprint', r.fingerprint]])))}"><code>${h(r.fingerprint)}</code></a></td><td>${h(r.status)}</td></tr>`,
    );
    parts.push(
      `<table data-testid="records"><thead><tr>${actions === undefined ? '' : SELECT_HEADER}<th>Last failure</th><th>Type</th><th>Version</th><th>Endpoint</th><th>Handler</th><th>Reason</th><th>Error</th><th>Attempts</th><th>Fingerprint</th><th>Status</th></tr></thead><tbody>\n${rows.join('\n')}\n</tbody></table>`,
    );
    if (actions !== undefined) parts.push(listActions(actions));
  }
  const links: string[] = [];
  if (query.cursor !== undefined) links.push(`<a href="${h(listHref(query.params))}">First page</a>`);
  if (page.next !== undefined) {
    const label = short ? 'More (search continues)' : 'Next page';
    links.push(`<a rel="next" href="${h(listHref(query.params, { cursor: page.next }))}">${label}</a>`);
  } else if (page.records.length > 0 || query.cursor !== undefined) {
    links.push('<span class="muted" data-testid="end">End of the list</span>');
  }
  if (links.length > 0) parts.push(`<nav class="paging">${links.join('')}</nav>`);
  return parts.join('\n');
}

/**
 * The failure groups: the filter form, problems or one page of groups, and paging links; with
 * `actions`, a replay and a purge button per group.
 */
export function groupsBody(
  query: ListQuery,
  result: DeadLetterGroupPage | undefined,
  actions?: ActionView,
): string {
  const parts = [`<h1>Failure groups</h1>`, filterForm(query, '/groups')];
  if (result === undefined) {
    parts.push(...query.problems.map((p) => `<p class="error" role="alert">${h(p)}</p>`));
    return parts.join('\n');
  }
  if (result.groups.length === 0) {
    parts.push('<p>No dead letters match.</p>');
  } else {
    const rows = result.groups.map(
      (g) =>
        `<tr><td class="num">${g.count}</td><td class="when">${h(isoTime(g.firstSeen))}</td><td class="when">${h(isoTime(g.lastSeen))}</td><td>${h(g.type ?? '-')}</td><td>${h(g.handler ?? '-')}</td><td>${h(g.reason)}</td><td>${h(preview(maskSecrets(g.sampleError)))}</td><td><a href="${h(listHref(query.params, { fingerprint: g.fingerprint }))}"><code>${h(g.fingerprint)}</code></a></td>${actions === undefined ? '' : groupActions(actions, query.params, g.fingerprint)}</tr>`,
    );
    parts.push(
      `<table data-testid="groups"><thead><tr><th>Count</th><th>First seen</th><th>Last seen</th><th>Type</th><th>Handler</th><th>Reason</th><th>Sample error</th><th>Fingerprint</th>${actions === undefined ? '' : ACTIONS_HEADER}</tr></thead><tbody>\n${rows.join('\n')}\n</tbody></table>`,
    );
    if (actions !== undefined) parts.push(groupsFooter(actions));
  }
  const links: string[] = [];
  if (query.cursor !== undefined)
    links.push(`<a href="${h(pageHref('/groups', query.params))}">First page</a>`);
  if (result.next !== undefined) {
    links.push(
      `<a rel="next" href="${h(pageHref('/groups', query.params, { cursor: result.next }))}">Next page</a>`,
    );
  }
  if (links.length > 0) parts.push(`<nav class="paging">${links.join('')}</nav>`);
  return parts.join('\n');
}

/** The envelope as indented JSON when it is JSON, else as received. */
function prettyEnvelope(envelope: string): string {
  try {
    return JSON.stringify(JSON.parse(envelope), null, 2);
  } catch {
    return envelope;
  }
}

/**
 * What became of one replay: handled (and when), failed again, or pending. Only a dead record is
 * replayed, so a replay followed by another one died again, unless it was handled first.
 */
function replayOutcomeText(record: DeadLetterRecord, replay: ReplayRecord, latest: boolean): string {
  if (replay.handledAt !== undefined) return `handled ${isoTime(replay.handledAt)}`;
  if (!latest) return 'failed again';
  const outcome = replayOutcome(record, replay.at);
  return outcome === 'failed-again' ? `failed again ${isoTime(record.lastFailedAt)}` : 'pending';
}

/** The message's payload version from the record's envelope, `-` when the envelope is not JSON. */
function versionText(r: DeadLetterRecord): string {
  return String(deadLetterVersion(r.envelope) ?? '-');
}

/** One dead letter: its facts, error, stack, envelope, attempts and replays; with `actions`, its buttons. */
export function recordBody(r: DeadLetterRecord, actions?: ActionView): string {
  const facts: [string, string][] = [
    ['Id', r.id],
    ['Message id', r.messageId ?? '-'],
    ['Type', r.type ?? '-'],
    ['Version', versionText(r)],
    ['Kind', r.kind ?? '-'],
    ['Endpoint', r.endpoint],
    ['Handler', r.handler ?? '-'],
    ['Reason', r.reason],
    ['Status', r.status],
    ['Attempts', String(r.attemptCount)],
    ['First failure', isoTime(r.firstFailedAt)],
    ['Last failure', isoTime(r.lastFailedAt)],
    ['Fingerprint', r.fingerprint],
    ['Partition key', r.partitionKey ?? '-'],
    ['Ordered', r.ordered ? 'yes' : 'no'],
  ];
  if (r.logPosition !== undefined) {
    const { topic, partition, offset } = r.logPosition;
    facts.push(['Log position', `${topic} / ${partition} @ ${offset}`]);
  }
  const attempts =
    r.attempts.length === 0
      ? '<p class="muted">None recorded.</p>'
      : `<table data-testid="attempts"><thead><tr><th>Attempt</th><th>At</th><th>Error</th></tr></thead><tbody>${r.attempts
          .map(
            (a) =>
              `<tr><td class="num">${a.attempt}</td><td>${h(isoTime(a.at))}</td><td>${h(`${a.error.name}: ${maskSecrets(a.error.message)}`)}</td></tr>`,
          )
          .join('')}</tbody></table>`;
  const replays =
    r.replays.length === 0
      ? '<p class="muted">Never replayed.</p>'
      : `<table data-testid="replays"><thead><tr><th>At</th><th>By</th><th>Outcome</th></tr></thead><tbody>${r.replays
          .map(
            (p, i) =>
              `<tr><td>${h(isoTime(p.at))}</td><td>${h(p.by ?? '-')}</td><td data-testid="replay-outcome">${h(replayOutcomeText(r, p, i === r.replays.length - 1))}</td></tr>`,
          )
          .join('')}</tbody></table>`;
  return [
    `<h1>${h(r.type ?? 'Unknown type')} <span class="muted">in ${h(r.endpoint)}</span></h1>`,
    `<p><a href="/">← All dead letters</a> · <a href="${h(listHref(new Map([['fingerprint', r.fingerprint]])))}">Same failure</a></p>`,
    `<dl>${facts.map(([k, v]) => `<dt>${h(k)}</dt><dd>${h(v)}</dd>`).join('')}</dl>`,
    actions === undefined ? '' : recordActions(actions, r),
    `<h2>Error</h2><p class="error" data-testid="error">${h(`${r.error.name}: ${maskSecrets(r.error.message)}`)}</p>`,
    `<h2>Stack</h2><pre data-testid="stack">${h(maskSecrets(r.error.stack ?? '(none)'))}</pre>`,
    `<h2>Envelope</h2><pre data-testid="envelope">${h(prettyEnvelope(r.envelope))}</pre>`,
    `<h2>Attempts</h2>${attempts}`,
    `<h2>Replays</h2>${replays}`,
  ].join('\n');
}
