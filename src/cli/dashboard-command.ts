import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  MIN_TOKEN_LENGTH,
  createDashboard,
  isLoopbackHost,
  type DashboardReplay,
} from '../dashboard/index.js';
import { replayDeadLetters } from '../dead-letters/replay-dead-letters.js';
import { silentLogger } from '../logging/logger.js';
import { signerOf } from './dlq/index.js';
import { GLOBAL_HELP, contextOf, noPositionals, openAdmin, parse } from './cli-context.js';
import { CliExit, ExitCode, usageError, writeJson, type CliIo } from './cli-io.js';
import { isHost } from './server-url.js';

export const DASHBOARD_HELP = `Usage: harrier dashboard [--host 127.0.0.1] [--port 8080] [--token <secret>] [--allow-actions]

Serves the dashboard (docs/dashboard.md) of the Harrier system until SIGINT or SIGTERM:
the dead letters with filters and paging, failure groups, each record's envelope, error, attempts
and replays; projections with their checkpoints, lag and dead letters (what \`harrier projections
status\` shows); the topology: endpoints, subscriptions and queue depths (what \`harrier
topology\` shows); and the recurring schedules (what \`harrier schedules list\` shows). With
--allow-actions, replay (with each message's outcome), purge, and cancel a schedule. Prints its
URL (--json: {"url": ...}).

Options:
  --host <host>       address to listen on (default: 127.0.0.1); any other than loopback needs a token
  --port <port>       port to listen on, 0 for a free one (default: 8080)
  --token <secret>    secret the browser must present, at least 16 characters (default:
                      $HARRIER_DASHBOARD_TOKEN); open the URL once with ?token=<secret> and a
                      cookie keeps it
  --allow-actions     allow pages to replay and purge dead letters (read-only without it); a replay
                      is the one of harrier dlq replay, recorded as by dashboard
  --signing-keys <k>  with --allow-actions: comma-separated hex keys (default $HARRIER_SIGNING_KEYS);
                      refuse, with signature-invalid, every record whose envelope no longer verifies

${GLOBAL_HELP}
`;

/** The signals that stop the server; tests may pass their own emitter. */
export interface StopSignals {
  once(signal: 'SIGINT' | 'SIGTERM', listener: () => void): unknown;
  off(signal: 'SIGINT' | 'SIGTERM', listener: () => void): unknown;
}

/** Runs `harrier dashboard`: serves until SIGINT or SIGTERM, then closes everything and exits 0. */
export async function dashboardCommand(
  argv: readonly string[],
  io: CliIo,
  signals: StopSignals = process,
): Promise<number> {
  const { values, positionals } = parse(argv, {
    host: { type: 'string' },
    port: { type: 'string' },
    token: { type: 'string' },
    'allow-actions': { type: 'boolean' },
    'signing-keys': { type: 'string' },
  });
  if (values.help === true) {
    io.stdout.write(DASHBOARD_HELP);
    return ExitCode.ok;
  }
  noPositionals(positionals, 'harrier dashboard');
  const host = values.host ?? '127.0.0.1';
  if (!isHost(host) && !isHost(`[${host}]`)) {
    throw usageError(`--host "${host}" is not a host name or address, e.g. 127.0.0.1 or ::1`);
  }
  const portText = values.port ?? '8080';
  const port = /^\d{1,5}$/.test(portText) ? Number(portText) : Number.NaN;
  if (!(port >= 0 && port <= 65_535)) {
    throw usageError(`--port "${portText}" is not a port from 0 (a free one) to 65535`);
  }
  const tokenText = values.token ?? io.env.HARRIER_DASHBOARD_TOKEN;
  const token = tokenText === '' ? undefined : tokenText;
  if (token === undefined && !isLoopbackHost(host)) {
    throw usageError(
      `--host ${host} is reachable from other machines, so a token is required: pass --token <secret> (or set HARRIER_DASHBOARD_TOKEN), or use --host 127.0.0.1`,
    );
  }
  if (token !== undefined && token.length < MIN_TOKEN_LENGTH) {
    throw usageError(
      `The token (${values.token === undefined ? 'HARRIER_DASHBOARD_TOKEN' : '--token'}) has ${token.length} character${token.length === 1 ? '' : 's'}, and one under ${MIN_TOKEN_LENGTH} can be guessed: pass a random one of at least ${MIN_TOKEN_LENGTH}, e.g. --token "$(openssl rand -base64 24)"`,
    );
  }
  const allowActions = values['allow-actions'] === true;
  const signer = allowActions ? signerOf(values['signing-keys'] ?? io.env.HARRIER_SIGNING_KEYS) : undefined;
  const ctx = contextOf(io, values);
  // Where the records come from, for the page header (createDashboard masks a password in it).
  const source =
    ctx.transport === undefined
      ? `${ctx.where} ${ctx.scope}`
      : `${ctx.where} ${ctx.scope}, broker ${ctx.transport.where} ${ctx.transport.prefix}`;
  const admin = await openAdmin(ctx);
  try {
    const store = admin.deadLetterStore();
    let replay: DashboardReplay | undefined;
    if (allowActions) {
      // Opened now, not on the first replay, so a broker that cannot start stops the command at once.
      const broker = await admin.broker({ logger: silentLogger });
      replay = (ids, options) =>
        replayDeadLetters({
          store,
          broker,
          ids,
          ...options,
          ...(signer !== undefined ? { verifySignature: (body: string) => signer.verify(body) } : {}),
        });
    }
    // A backend with a transactional outbox (PostgreSQL) hands out its parked rows; others have none.
    const outbox = admin.outboxAdmin?.();
    const handler = createDashboard({
      deadLetters: store,
      host,
      allowActions,
      ...(replay !== undefined ? { replay } : {}),
      source,
      topology: () => admin.topology(),
      projections: () => admin.projectionLags(),
      ...(outbox !== undefined ? { outbox } : {}),
      // Every backend keeps recurring schedules; the store closes with the admin.
      schedules: admin.scheduleStore(),
      ...(token !== undefined ? { token } : {}),
    });
    const server = createServer(handler);
    await new Promise<void>((resolve, reject) => {
      server.once('error', (error) => {
        reject(new CliExit(ExitCode.someFailed, `Cannot listen on ${host}:${port}: ${error.message}`));
      });
      server.listen(port, host, resolve);
    });
    const address = server.address() as AddressInfo;
    const urlHost = address.address.includes(':') ? `[${address.address}]` : address.address;
    const url = `http://${urlHost}:${address.port}/`;
    if (ctx.json) writeJson(io.stdout, { url });
    else {
      io.stdout.write(
        `Dashboard at ${url} (${allowActions ? 'actions allowed' : 'read-only'})${token === undefined ? '' : '; open it once with ?token=<your token>'}; Ctrl-C to stop\n`,
      );
    }
    await new Promise<void>((resolve) => {
      const stop = (): void => {
        signals.off('SIGINT', stop);
        signals.off('SIGTERM', stop);
        resolve();
      };
      signals.once('SIGINT', stop);
      signals.once('SIGTERM', stop);
    });
    await new Promise<void>((resolve) => {
      server.close(() => {
        resolve();
      });
      server.closeAllConnections();
    });
    return ExitCode.ok;
  } finally {
    await admin.close();
  }
}
