import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import type { AddressInfo } from 'node:net';
import { createDashboard, type DashboardOptions } from '../../src/dashboard/index.js';
import type { DeadLetterRecord } from '../../src/dead-letters/dead-letter-store.js';
import {
  CommandHandler,
  UnrecoverableError,
  type CommandDefinition,
  type PayloadOf,
} from '../../src/index.js';
import { updateScreenshots } from './browser.js';

const IMAGES = join(import.meta.dirname, '..', '..', 'docs', 'images');

/** A dead-letter record with readable defaults; `overrides` wins. */
export function deadLetter(n: number, overrides: Partial<DeadLetterRecord> = {}): DeadLetterRecord {
  const at = Date.UTC(2026, 0, 31, 12, 0, 0) + n * 60_000;
  const error = {
    name: 'Error',
    message: `failure ${n}`,
    stack: `Error: failure ${n}\n    at handle (/app/orders.ts:10:5)`,
  };
  return {
    id: `dl-${String(n).padStart(4, '0')}`,
    messageId: `msg-${n}`,
    kind: 'command',
    type: 'orders.PlaceOrder',
    endpoint: 'orders',
    handler: 'PlaceOrderHandler',
    reason: 'handler-failed',
    error,
    attempts: [{ attempt: 1, at, error }],
    attemptCount: 1,
    firstFailedAt: at,
    lastFailedAt: at,
    fingerprint: 'fp-orders',
    envelope: JSON.stringify({ id: `msg-${n}`, type: 'orders.PlaceOrder', payload: { orderId: `o-${n}` } }),
    partitionKey: undefined,
    ordered: false,
    status: 'dead',
    replays: [],
    ...overrides,
  };
}

/** A dashboard served by node:http on a free loopback port. */
export interface ServedDashboard {
  readonly url: string;
  close(): Promise<void>;
}

export async function serveDashboard(options: DashboardOptions): Promise<ServedDashboard> {
  const server: Server = createServer(createDashboard(options));
  await new Promise<void>((resolve) => {
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => {
          if (error) reject(error);
          else resolve();
        });
      }),
  };
}

/** Whether the handlers of {@link failingWhile} fail, and the order ids they handled. */
export interface FaultSwitch {
  failing: boolean;
  readonly handled: string[];
}

/**
 * A handler of `command` that fails for good (straight to the dead letters) with an error named
 * `errorName` (so each command's failures form a group of their own) and `message(payload)` while
 * `fault.failing`, and else records the payload's `orderId`.
 */
export function failingWhile<D extends CommandDefinition>(
  command: D,
  fault: FaultSwitch,
  errorName: string,
  message: (payload: PayloadOf<D>) => string,
): new () => object {
  const name = `${command.type.split('.').pop() ?? ''}Handler`;
  const handler = {
    [name]: class {
      handle(payload: PayloadOf<D>) {
        if (fault.failing) {
          throw Object.assign(new UnrecoverableError(message(payload)), { name: errorName });
        }
        fault.handled.push((payload as { orderId: string }).orderId);
      }
    },
  }[name];
  if (handler === undefined) throw new Error('unreachable');
  CommandHandler(command)(handler);
  return handler;
}

/** Writes docs/images/dashboard-<name>.png when UPDATE_SCREENSHOTS=1, so CI never rewrites them. */
export async function screenshot(page: Page, name: string): Promise<void> {
  if (updateScreenshots()) {
    await page.screenshot({ path: join(IMAGES, `dashboard-${name}.png`), fullPage: true });
  }
}

/** The cells of each body row of the table marked `data-testid="<testid>"`, tags stripped, `<br>` as `,`. */
export function tableRows(html: string, testid: string): string[][] {
  const table = new RegExp(`<table data-testid="${testid}">([\\s\\S]*?)</table>`).exec(html)?.[1] ?? '';
  const body = /<tbody>([\s\S]*?)<\/tbody>/.exec(table)?.[1] ?? '';
  return [...body.matchAll(/<tr[^>]*>([\s\S]*?)<\/tr>/g)].map((row) =>
    [...(row[1] ?? '').matchAll(/<td[^>]*>([\s\S]*?)<\/td>/g)].map((cell) =>
      (cell[1] ?? '').replace(/<br>/g, ',').replace(/<[^>]+>/g, ''),
    ),
  );
}

/** Undoes the dashboard's HTML escaping of an attribute or text value. */
export function unescape(text: string): string {
  return text
    .replaceAll('&quot;', '"')
    .replaceAll('&#39;', "'")
    .replaceAll('&lt;', '<')
    .replaceAll('&gt;', '>')
    .replaceAll('&amp;', '&');
}
