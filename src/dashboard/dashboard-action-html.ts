import type { DeadLetterFilter, DeadLetterRecord } from '../dead-letters/dead-letter-store.js';
import type { ReplayFailure } from '../dead-letters/replay-dead-letters.js';
import { escapeHtml as h, isoTime, maskSecrets } from './dashboard-html.js';
import { CSRF_FIELD } from './dashboard-csrf.js';
import { listHref } from './dashboard-query.js';
import type { JobRowState, ReplayJob } from './replay-jobs.js';

/** What a page needs to draw action forms: the browser's CSRF token, and whether replay is wired. */
export interface ActionView {
  readonly csrf: string;
  readonly replay: boolean;
}

/** The records an action works on: ids picked by hand, or every record matching the list's filters. */
export type ActionSelection =
  | { readonly kind: 'ids'; readonly ids: readonly string[] }
  | {
      readonly kind: 'filter';
      /** The filter parameters as given, to carry into the next form and links. */
      readonly params: ReadonlyMap<string, string>;
      readonly filter: DeadLetterFilter;
    };

/** Rows of a job page's table; counts cover every record. */
const JOB_TABLE_ROWS = 500;

/** Ids shown on a purge confirmation. */
const CONFIRM_IDS_SHOWN = 50;

function hidden(name: string, value: string): string {
  return `<input type="hidden" name="${h(name)}" value="${h(value)}">`;
}

function recordHref(id: string): string {
  return `/records/${encodeURIComponent(id)}`;
}

/** The line shown where replay buttons would be when the dashboard was given no `replay`. */
function replayOff(view: ActionView): string {
  return view.replay
    ? ''
    : '<p class="muted" data-testid="replay-off">Replay is off: pass <code>replay: (ids, o) =&gt; bus.replayDeadLetters(ids, o)</code> to createDashboard (<code>harrier dashboard --allow-actions</code> does).</p>';
}

function buttons(view: ActionView, replayLabel: string, purgeLabel: string): string {
  const replay = view.replay
    ? `<button type="submit" formaction="/actions/replay" data-action="replay">${replayLabel}</button>`
    : '';
  return `${replay}<button type="submit" formaction="/actions/purge" data-action="purge">${purgeLabel}</button>`;
}

/** The header cell of the list's selection column. */
export const SELECT_HEADER = '<th>Select</th>';

/** A list row's checkbox; it belongs to the form {@link listActions} draws below the table. */
export function selectCell(id: string): string {
  return `<td><input type="checkbox" form="selection" name="id" value="${h(id)}" aria-label="select ${h(id)}"></td>`;
}

/** The form under the list that replays or purges the checked records. */
export function listActions(view: ActionView): string {
  return `<form id="selection" class="actions" method="post" action="/actions/purge">${hidden(CSRF_FIELD, view.csrf)}${buttons(view, 'Replay selected', 'Purge selected')}</form>${replayOff(view)}`;
}

/**
 * A group row's form: the group is every record of `fingerprint` under the page's filters (its
 * status filter included, dead by default), resolved on the server when the form is sent.
 */
export function groupActions(
  view: ActionView,
  params: ReadonlyMap<string, string>,
  fingerprint: string,
): string {
  const fields = [...params]
    .filter(([name]) => name !== 'limit' && name !== 'fingerprint' && name !== 'cursor')
    .map(([name, value]) => hidden(name, value))
    .join('');
  // The records the row counts: the page's status filter (dead unless it says otherwise) stays.
  const status = params.has('status') ? '' : hidden('status', 'dead');
  return `<td><form class="actions" method="post" action="/actions/purge">${hidden(CSRF_FIELD, view.csrf)}${hidden('scope', 'filter')}${fields}${hidden('fingerprint', fingerprint)}${status}${buttons(view, 'Replay group', 'Purge group')}</form></td>`;
}

/** The header cell of the groups' action column. */
export const ACTIONS_HEADER = '<th>Actions</th>';

/** Below the groups table: what is missing for replay, if anything. */
export function groupsFooter(view: ActionView): string {
  return replayOff(view);
}

/** The record page's form. */
export function recordActions(view: ActionView, record: DeadLetterRecord): string {
  const form = `<form class="actions" method="post" action="/actions/purge">${hidden(CSRF_FIELD, view.csrf)}${hidden('id', record.id)}${
    record.status === 'dead' || !view.replay
      ? buttons(view, 'Replay', 'Purge')
      : `<button type="submit" formaction="/actions/purge" data-action="purge">Purge</button> <span class="muted">already replayed</span>`
  }</form>`;
  return `<h2>Actions</h2>${form}${replayOff(view)}`;
}

/** The selection in words. */
export function describeSelection(selection: ActionSelection): string {
  if (selection.kind === 'ids') {
    return selection.ids.length === 1
      ? `dead letter ${selection.ids[0] ?? ''}`
      : `${selection.ids.length} selected dead letters`;
  }
  const parts = [...selection.params]
    .filter(([name]) => name !== 'limit')
    .map(([name, value]) => `${name} = ${value}`);
  return parts.length === 0 ? 'every dead letter' : `dead letters where ${parts.join(', ')}`;
}

/** Where Cancel and Back lead: the record, or the list under the selection's filters. */
export function backHref(selection: ActionSelection): string {
  if (selection.kind === 'ids') return selection.ids.length === 1 ? recordHref(selection.ids[0] ?? '') : '/';
  return listHref(new Map([...selection.params].filter(([name]) => name !== 'limit')));
}

function selectionFields(selection: ActionSelection): string {
  if (selection.kind === 'ids') return selection.ids.map((id) => hidden('id', id)).join('');
  return (
    hidden('scope', 'filter') + [...selection.params].map(([name, value]) => hidden(name, value)).join('')
  );
}

/**
 * "Purge N dead letters?": what would go (the records picked, or the filter), a button that sends
 * the same selection again with `confirm=yes`, and Cancel.
 */
export function confirmPurgeBody(
  view: ActionView,
  selection: ActionSelection,
  count: number,
  picked: readonly DeadLetterRecord[] = [],
  asOf = 0,
): string {
  const line = (r: DeadLetterRecord): string =>
    `<li><a href="${h(recordHref(r.id))}"><code>${h(r.id)}</code></a> ${h(r.type ?? '-')} in ${h(r.endpoint)}: ${h(`${r.error.name}: ${maskSecrets(r.error.message)}`)}</li>`;
  const what =
    selection.kind === 'ids'
      ? `<ul data-testid="purge-ids">${picked.slice(0, CONFIRM_IDS_SHOWN).map(line).join('')}${
          picked.length > CONFIRM_IDS_SHOWN ? `<li>and ${picked.length - CONFIRM_IDS_SHOWN} more</li>` : ''
        }</ul>`
      : `<p>The ${count} record${count === 1 ? '' : 's'} matching <strong>${h(describeSelection(selection))}</strong> now; records that fail after this page are kept.</p>`;
  return [
    `<h1>Purge ${count} dead letter${count === 1 ? '' : 's'}?</h1>`,
    `<p>They are deleted from the store for good: they cannot be replayed or looked at afterwards.</p>`,
    what,
    `<form class="actions" method="post" action="/actions/purge">${hidden(CSRF_FIELD, view.csrf)}${selectionFields(selection)}${selection.kind === 'filter' ? hidden('asOf', String(asOf)) + hidden('count', String(count)) : ''}${hidden('confirm', 'yes')}<button type="submit" data-action="confirm-purge">Purge ${count}</button> <a href="${h(backHref(selection))}">Cancel</a></form>`,
  ].join('\n');
}

/** After a purge: how many went. */
export function purgedBody(selection: ActionSelection, removed: number): string {
  const back = selection.kind === 'ids' && selection.ids.length === 1 ? '/' : backHref(selection);
  return `<h1 data-testid="purged">Purged ${removed} dead letter${removed === 1 ? '' : 's'}</h1><p>${h(describeSelection(selection))}.</p><p><a href="${h(back)}">Back to the dead letters</a></p>`;
}

const STATE_LABEL: Record<JobRowState, string> = {
  queued: 'queued',
  refused: 'refused',
  skipped: 'skipped (already replayed)',
  pending: 'pending',
  handled: 'handled',
  'failed-again': 'failed again',
  gone: 'gone (removed since)',
};

/** Whether the job page should load itself again: the replay runs, or a message has no outcome yet. */
export function jobIsLive(
  job: ReplayJob,
  rows: ReadonlyMap<string, JobRowState>,
  tracksHandled: boolean,
): boolean {
  if (!job.finished) return true;
  if (!tracksHandled) return false;
  for (const state of rows.values()) if (state === 'pending') return true;
  return false;
}

/** A replay job's page: progress, refusals, and each replayed message's outcome. */
export function jobBody(
  job: ReplayJob,
  rows: ReadonlyMap<string, JobRowState>,
  tracksHandled: boolean,
): string {
  const counts = new Map<JobRowState, number>();
  for (const state of rows.values()) counts.set(state, (counts.get(state) ?? 0) + 1);
  const n = (state: JobRowState): number => counts.get(state) ?? 0;
  const done = job.results.size;
  const total = job.ids.length;
  const status = job.failure !== undefined ? 'stopped' : job.finished ? 'finished' : 'running';
  const summary = (['pending', 'handled', 'failed-again', 'refused', 'skipped', 'gone'] as const)
    .map((s) => `<span data-testid="count-${s}"><strong>${n(s)}</strong> ${STATE_LABEL[s]}</span>`)
    .join(' · ');
  const refusals = job.ids
    .map((id) => job.results.get(id))
    .filter((r): r is ReplayFailure => r !== undefined && !r.ok && r.error !== 'already-replayed');
  const refusedTable =
    refusals.length === 0
      ? ''
      : `<h2>Refused</h2><table data-testid="refused"><thead><tr><th>Dead letter</th><th>Code</th><th>Why</th></tr></thead><tbody>${refusals
          .map(
            (r) =>
              `<tr><td><a href="${h(recordHref(r.id))}">${h(r.id)}</a></td><td><code>${h(r.error)}</code></td><td>${h(r.message)}</td></tr>`,
          )
          .join('')}</tbody></table>`;
  const shown = job.ids.slice(0, JOB_TABLE_ROWS);
  const table = `<table data-testid="outcomes"><thead><tr><th>Dead letter</th><th>Outcome</th></tr></thead><tbody>${shown
    .map((id) => {
      const state = rows.get(id) ?? 'queued';
      return `<tr data-state="${state}"><td><a href="${h(recordHref(id))}">${h(id)}</a></td><td>${h(STATE_LABEL[state])}</td></tr>`;
    })
    .join(
      '',
    )}</tbody></table>${total > shown.length ? `<p class="muted">The first ${shown.length} of ${total} are listed; the counts cover all.</p>` : ''}`;
  return [
    `<h1>Replay of ${h(job.description)}</h1>`,
    `<p class="muted">Started ${h(isoTime(job.startedAt))} by the dashboard; ${status}. This page is kept in memory by this dashboard and is gone when it restarts.</p>`,
    `<p><progress max="${total}" value="${done}"></progress> <span data-testid="progress">${done}/${total}</span> sent back or refused</p>`,
    `<p data-testid="counts">${summary}</p>`,
    job.failure === undefined
      ? ''
      : `<p class="error" role="alert">The replay stopped: ${h(job.failure)}</p>`,
    tracksHandled
      ? ''
      : '<p class="muted">This dead-letter store does not record handled replays (no <code>markReplayHandled</code>): a replayed message shows <em>pending</em> until it fails again.</p>',
    refusedTable,
    `<h2>Outcomes</h2>${table}`,
    `<p><a href="/">Back to the dead letters</a></p>`,
  ]
    .filter((part) => part !== '')
    .join('\n');
}
