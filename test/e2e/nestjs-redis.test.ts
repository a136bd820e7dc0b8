/**
 * harrier/nestjs in a real Nest application, as a Nest team builds one: test/e2e/fixtures/nestjs-app
 * is compiled to CommonJS with Nest's usual tsconfig (emitDecoratorMetadata, experimentalDecorators,
 * "module": "commonjs", constructor injection by type) into a temp dir whose node_modules links
 * harrier (this repo, through its package.json exports) and the packages the app imports. It runs as
 * two processes on Redis: `orders` (Nest's Express adapter; POST /orders sends PlaceOrder, whose
 * handler uses a Nest service and publishes OrderPlaced) and `billing` (two OrderPlaced handlers,
 * one slow), each with `app.enableShutdownHooks()`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { RedisDeadLetterStore, openRedisAdmin } from '../../src/redis/index.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const root = join(import.meta.dirname, '..', '..');
const fixture = join(import.meta.dirname, 'fixtures', 'nestjs-app');
const tsc = join(root, 'node_modules', '@typescript', 'native', 'bin', 'tsc');
/** The packages the app imports itself, linked where this repo resolves them. */
const APP_PACKAGES = [
  '@nestjs/common',
  '@nestjs/core',
  '@nestjs/platform-express',
  '@types/node',
  'reflect-metadata',
  'rxjs',
  'zod',
];
/** How long a line may take: compiling and starting Nest on a loaded 2-core machine included. */
const LINE_TIMEOUT_MS = 30_000;

type Line = Record<string, unknown>;

/** One process of the app: its JSON lines on stdout, and waits for them. */
class AppProcess {
  readonly lines: Line[] = [];
  stderr = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly #child: ChildProcess;
  readonly #waiters = new Set<() => void>();

  constructor(dir: string, env: Record<string, string>) {
    this.#child = spawn(process.execPath, [join(dir, 'dist', 'main.js')], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let pending = '';
    this.#child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      pending += chunk;
      const complete = pending.split('\n');
      pending = complete.pop() ?? '';
      for (const text of complete) {
        if (text.trim() === '') continue;
        try {
          this.lines.push(JSON.parse(text) as Line);
        } catch {
          this.lines.push({ event: 'text', text });
        }
      }
      for (const wake of [...this.#waiters]) wake();
    });
    this.#child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      this.stderr += chunk;
    });
    this.exited = new Promise((resolve) => {
      this.#child.once('exit', (code, signal) => {
        resolve({ code, signal });
        for (const wake of [...this.#waiters]) wake();
      });
    });
  }

  get running(): boolean {
    return this.#child.exitCode === null && this.#child.signalCode === null;
  }

  kill(signal: NodeJS.Signals): void {
    this.#child.kill(signal);
  }

  /** The first line that matches, once it is printed (fails after {@link LINE_TIMEOUT_MS}). */
  waitFor(what: string, matches: (line: Line) => boolean): Promise<Line> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const line = this.lines.find(matches);
        if (line !== undefined) {
          done();
          resolve(line);
        } else if (!this.running) {
          done();
          reject(new Error(`the process exited before printing ${what}; stderr:\n${this.stderr}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(
          new Error(
            `no ${what} within ${LINE_TIMEOUT_MS} ms; lines:\n${this.lines.map((line) => JSON.stringify(line)).join('\n')}\nstderr:\n${this.stderr}`,
          ),
        );
      }, LINE_TIMEOUT_MS);
      const done = (): void => {
        clearTimeout(timer);
        this.#waiters.delete(check);
      };
      this.#waiters.add(check);
      check();
    });
  }
}

/** Copies the fixture app into a temp dir, links its packages and compiles it; returns the dir. */
function buildApp(): string {
  const dir = mkdtempSync(join(tmpdir(), 'harrier-nestjs-app-'));
  cpSync(join(fixture, 'src'), join(dir, 'src'), { recursive: true });
  cpSync(join(fixture, 'tsconfig.json'), join(dir, 'tsconfig.json'));
  // No "type": the compiled .js files are CommonJS, as in a Nest project.
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'nest-shop', private: true }));
  const modules = join(dir, 'node_modules');
  mkdirSync(join(modules, '@nestjs'), { recursive: true });
  mkdirSync(join(modules, '@types'), { recursive: true });
  symlinkSync(root, join(modules, 'harrier'), 'dir');
  for (const name of APP_PACKAGES) symlinkSync(packageDir(name), join(modules, name), 'dir');
  return dir;
}

/** Where Node finds package `name` from this repo (its folder, whatever its "exports" allow). */
function packageDir(name: string): string {
  const lookup = createRequire(join(root, 'package.json')).resolve.paths(name) ?? [];
  const found = lookup
    .map((folder) => join(folder, name))
    .find((folder) => existsSync(join(folder, 'package.json')));
  if (found === undefined) throw new Error(`${name} is not installed: run npm install`);
  return found;
}

/** Runs tsc on the app's tsconfig.json; throws with its output unless it exits 0. */
function compile(dir: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [tsc, '-p', join(dir, 'tsconfig.json')], {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.once('error', reject);
    child.once('exit', (code) => {
      if (code === 0) resolve();
      else reject(new Error(`tsc exited ${String(code)}:\n${output}`));
    });
  });
}

const prefix = freshPrefix();
let dir: string | undefined;
let orders: AppProcess | undefined;
let billing: AppProcess | undefined;
let ordersUrl = '';

/** Stops a process that is still running (SIGTERM, then SIGKILL after 15 s). */
async function stop(app: AppProcess | undefined): Promise<void> {
  if (app === undefined || !app.running) return;
  app.kill('SIGTERM');
  const killer = setTimeout(() => {
    app.kill('SIGKILL');
  }, 15_000);
  await app.exited;
  clearTimeout(killer);
}

beforeAll(async () => {
  dir = buildApp();
  await compile(dir);
  const env = { REDIS_URL: redisUrl, HARRIER_PREFIX: prefix, RECEIPT_MS: '1500' };
  // Billing first: its subscriptions must be registered before orders publishes OrderPlaced.
  billing = new AppProcess(dir, { ...env, ROLE: 'billing' });
  await billing.waitFor('billing ready', (line) => line.event === 'ready');
  orders = new AppProcess(dir, { ...env, ROLE: 'orders' });
  ordersUrl = String((await orders.waitFor('orders ready', (line) => line.event === 'ready')).url);
}, 120_000);

afterAll(async () => {
  await Promise.all([stop(orders), stop(billing)]);
  const client = new Redis(redisUrl);
  try {
    await deleteKeys(client, prefix);
  } finally {
    await client.quit();
  }
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
}, 60_000);

/** POSTs an order to the orders process; returns the id of the PlaceOrder it sent. */
async function postOrder(orderId: string, items: string[]): Promise<string> {
  const response = await fetch(`${ordersUrl}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ orderId, items }),
  });
  expect(response.status).toBe(201);
  return ((await response.json()) as { messageId: string }).messageId;
}

describe('harrier/nestjs in a Nest application compiled to CommonJS, two processes on Redis', () => {
  it('compiles to CommonJS that requires harrier/nestjs', () => {
    const compiled = readFileSync(join(dir ?? '', 'dist', 'harrier.js'), 'utf8');
    expect(compiled).toContain('require("harrier/nestjs")');
    expect(compiled).not.toMatch(/^import /m);
  });

  it('sends a command from a controller; its handler, using a Nest service, publishes an event the other process handles', async () => {
    const messageId = await postOrder('o-1', ['book', 'pen']);
    const placed = await orders!.waitFor(
      'placed o-1',
      (line) => line.event === 'placed' && line.orderId === 'o-1',
    );
    expect(placed.total).toBe(20);
    const charged = await billing!.waitFor(
      'charged o-1',
      (line) => line.event === 'charged' && line.orderId === 'o-1',
    );
    // The event carries the command's correlation id: its own id, as the conversation's first message.
    expect(charged).toMatchObject({ total: 20, correlationId: messageId });
    expect(charged.pid).not.toBe(placed.pid);
  });

  it('drains on SIGTERM: the handler in flight finishes and is acknowledged, and nothing is dead-lettered', async () => {
    await postOrder('o-2', ['lamp']);
    await billing!.waitFor(
      'receipt of o-2 started',
      (line) => line.event === 'receipt-started' && line.orderId === 'o-2',
    );
    // The event's other copy (ChargeCustomer) is handled first too: a copy not yet taken when the
    // process stops stays queued for the next worker, which is right but not what this test is about.
    await billing!.waitFor('charged o-2', (line) => line.event === 'charged' && line.orderId === 'o-2');
    // The receipt is still in flight when the signal comes.
    expect(billing!.lines.some((line) => line.event === 'receipt-finished' && line.orderId === 'o-2')).toBe(
      false,
    );
    billing!.kill('SIGTERM');
    const exit = await billing!.exited;
    // Nest ends the process with the signal again once its shutdown hooks are done.
    expect(exit.signal === 'SIGTERM' || exit.code === 0).toBe(true);

    const lines = billing!.lines;
    const finished = lines.findIndex((line) => line.event === 'receipt-finished' && line.orderId === 'o-2');
    const acked = lines.findIndex(
      (line) =>
        line.event === 'acked' &&
        line.handler === 'PrintReceipt' &&
        (line.payload as { orderId?: unknown } | undefined)?.orderId === 'o-2',
    );
    expect(finished).toBeGreaterThan(-1);
    expect(acked).toBeGreaterThan(finished);
    expect([...lines, ...orders!.lines].filter((line) => line.event === 'dead-lettered')).toEqual([]);

    const deadLetters = new RedisDeadLetterStore({ connection: redisUrl, prefix });
    const admin = await openRedisAdmin(redisUrl, { prefix });
    try {
      expect(await deadLetters.count()).toBe(0);
      // Every queue of the billing endpoint is empty: the delivery was acknowledged, not released.
      const { endpoints } = await admin.topology();
      const billingQueues =
        endpoints.find(({ endpoint }) => endpoint === 'shop-billing')?.subscriptions ?? [];
      expect(billingQueues.map(({ subscription }) => subscription.handler).sort()).toEqual([
        'ChargeCustomer',
        'PrintReceipt',
      ]);
      for (const { total } of billingQueues)
        expect(total).toMatchObject({ waiting: 0, active: 0, delayed: 0 });
    } finally {
      await admin.close();
      await deadLetters.close();
    }
  });
});
