import type { ScheduleRecord } from '../schedules/schedule-record.js';
import { scheduleOutcomeText } from '../schedules/schedule-outcome.js';
import type { ScheduleStore } from '../schedules/schedule-store.js';
import { CSRF_FIELD } from './dashboard-csrf.js';
import { escapeHtml as h, isoTime, maskSecrets } from './dashboard-html.js';

/** A page's status and escaped body. */
export interface SchedulesPage {
  readonly status: number;
  readonly body: string;
}

/** How long past its next run a schedule may go untouched before the page calls it overdue. */
export const OVERDUE_AFTER_MS = 60_000;

const NOT_CONFIGURED = `createDashboard({ deadLetters, schedules: admin.scheduleStore() }); // admin: a RedisAdmin or PostgresAdmin`;

/** `0 18 * * 1-5 (Europe/Berlin)` or `every 30000 ms`, as `harrier schedules list` shows it. */
function timingOf(record: ScheduleRecord): string {
  if (record.cron !== undefined) return `${record.cron} (${record.timeZone ?? 'UTC'})`;
  return `every ${record.everyMs ?? '?'} ms`;
}

/**
 * What the store tells of a schedule's last tick: none sent yet, the message it sent, or the failure
 * of a later tick's send (`failed`); and `overdue` when its next run passed more than
 * {@link OVERDUE_AFTER_MS} ago with no tick recorded since (no process runs it, or the one that
 * does is behind).
 */
function stateOf(record: ScheduleRecord, now: number): { text: string; overdue: boolean; failed: boolean } {
  const overdue = record.nextRunAt !== undefined && record.nextRunAt + OVERDUE_AFTER_MS < now;
  const last = scheduleOutcomeText(record, isoTime) ?? 'no tick sent yet';
  return { text: overdue ? `overdue (${last})` : last, overdue, failed: record.lastError !== undefined };
}

/** What the cancel that led to the page did: the name it removed, or the name it found gone. */
export interface ScheduleCancelOutcome {
  readonly cancelled?: string;
  readonly gone?: string;
}

function hidden(name: string, value: string): string {
  return `<input type="hidden" name="${h(name)}" value="${h(value)}">`;
}

function table(records: readonly ScheduleRecord[], now: number, csrf: string | undefined): string {
  const header = [
    'Name',
    'Timing',
    'Sends',
    'Catch-up',
    'Last tick',
    'Next run',
    'Outcome',
    ...(csrf !== undefined ? [''] : []),
  ];
  const rows = records.map((r) => {
    const state = stateOf(r, now);
    const cancel =
      csrf === undefined
        ? ''
        : `<td><form class="actions" method="post" action="/actions/schedule-cancel">${hidden(CSRF_FIELD, csrf)}${hidden('name', r.name)}<button type="submit" data-action="schedule-cancel">Cancel</button></form></td>`;
    return `<tr data-schedule="${h(r.name)}"${state.overdue || state.failed ? ' class="failed"' : ''}><td>${h(r.name)}</td><td><code>${h(timingOf(r))}</code></td><td>${h(`${r.kind} ${r.type}`)}</td><td>${h(r.catchUp)}</td><td class="when">${h(r.lastTickAt === undefined ? '-' : isoTime(r.lastTickAt))}</td><td class="when">${h(r.nextRunAt === undefined ? '-' : isoTime(r.nextRunAt))}</td><td${state.failed ? ' class="failed"' : ''}>${h(state.text)}</td>${cancel}</tr>`;
  });
  return `<table data-testid="schedules"><thead><tr>${header.map((c) => `<th>${h(c)}</th>`).join('')}</tr></thead><tbody>${rows.join('')}</tbody></table>`;
}

/**
 * `GET /schedules`: the recurring schedules (`bus.every`) the store holds, by name, each with a cancel
 * button when the dashboard allows actions (`csrf` given).
 */
export async function schedulesPage(
  schedules: ScheduleStore | undefined,
  now: number,
  csrf: string | undefined,
  outcome: ScheduleCancelOutcome = {},
): Promise<SchedulesPage> {
  if (schedules === undefined) {
    return {
      status: 200,
      body: [
        '<h1>Schedules</h1>',
        '<p data-testid="not-configured">This dashboard was started without a schedule store. Pass <code>schedules</code> to <code>createDashboard</code> to see the recurring schedules, for example:</p>',
        `<pre>${h(NOT_CONFIGURED)}</pre>`,
      ].join('\n'),
    };
  }
  let records: ScheduleRecord[];
  try {
    records = await schedules.list();
  } catch (error) {
    const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    return {
      status: 500,
      body: `<h1>The schedule store failed</h1><p class="error" role="alert" data-testid="source-failed">${h(maskSecrets(text))}</p><p class="muted">Reload the page to try again.</p>`,
    };
  }
  const notice =
    outcome.cancelled !== undefined
      ? `<p role="status" data-testid="schedule-cancelled">Cancelled schedule ${h(outcome.cancelled)}: every process running it stops at its next tick.</p>`
      : outcome.gone !== undefined
        ? `<p role="status" data-testid="schedule-gone">No schedule ${h(outcome.gone)}: it was already gone.</p>`
        : '';
  const intro = `<p class="muted">Recurring schedules started with <code>bus.every</code>, as the schedule store keeps them: the last tick a process sent, its outcome (the id of the message it sent, or why the send of a later tick failed: the broker was down) and when the next falls due. A schedule is overdue when its next run passed over a minute ago with no tick sent since: no running process has it, or the one that has it is behind. <code>harrier schedules</code> lists, shows and cancels them from a shell.${csrf !== undefined ? ' Cancel removes a schedule from the store; a process that calls <code>every</code> for it again stores it again.' : ''}</p>`;
  if (records.length === 0) {
    return {
      status: 200,
      body: `<h1>Schedules</h1>${notice}${intro}<p data-testid="schedules-empty">No schedules.</p>`,
    };
  }
  const sorted = [...records].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return {
    status: 200,
    body: `<h1>Schedules <span class="muted">(${h(String(sorted.length))})</span></h1>${notice}${intro}${table(sorted, now, csrf)}`,
  };
}
