/**
 * Harrier in a CommonJS app, as most NestJS apps compile: a `"type": "commonjs"` package whose
 * TypeScript turns `import` into `require()`, so every entry point is loaded through Node's
 * `require(esm)`. The app requires all of them and runs a bus on Redis (a command handled, the event
 * it publishes handled), with a Redis client of its own that Harrier's store shares.
 *
 * The app is linked, not installed: its node_modules has `harrier` as a link to this repository
 * (its package.json `exports` and the dist/ that test/global-setup.ts builds) and links to the
 * repository's peer dependencies, so the app and Harrier load one copy of each, as after an npm
 * install. test/e2e/packed-install.test.ts installs the packed tarball for real.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { deleteKeys } from '../helpers/redis.js';
import { ok, run } from '../helpers/run-command.js';

const redisUrl = inject('redisUrl');
const root = join(import.meta.dirname, '..', '..');
const modules = join(root, 'node_modules');

/** TypeScript 7 (`@typescript/native`) and TypeScript 6 (`typescript`), as the repository installs them. */
const TSC_7 = join(modules, '@typescript', 'native', 'bin', 'tsc');
const TSC_6 = join(
  modules,
  'typescript',
  Object.values(
    (
      JSON.parse(readFileSync(join(modules, 'typescript', 'package.json'), 'utf8')) as {
        bin: Record<string, string>;
      }
    ).bin,
  )[0] ?? 'bin/tsc',
);

/** The packages the app links from the repository: Harrier's peers, and the node types. */
const LINKED = [
  'inversify',
  '@inversifyjs/core',
  'reflect-metadata',
  'zod',
  'bullmq',
  'ioredis',
  'pg',
  'amqplib',
  '@opentelemetry/api',
  'vitest',
  '@types/node',
];

/** Every entry point in package.json `exports`, with a function each must export. */
const ENTRY_POINTS: Readonly<Record<string, string>> = {
  harrier: 'createBus',
  'harrier/extend': 'decodeEnvelope',
  'harrier/testing': 'createTestBus',
  'harrier/testing/conformance': 'describeMessageBrokerConformance',
  'harrier/redis': 'openRedisAdmin',
  'harrier/postgres': 'migratePostgres',
  'harrier/rabbitmq': 'RabbitMqBroker',
  'harrier/telemetry': 'harrierTelemetry',
  'harrier/dashboard': 'createDashboard',
  'harrier/cli': 'run',
};

/** The app: decorated handlers resolved from inversify, BullMqBroker, a RedisDeadLetterStore on its own client. */
const MAIN_TS = `import { Container, inject, injectable } from 'inversify';
import { Redis } from 'ioredis';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  createBus,
  defineCommand,
  defineEvent,
  silentLogger,
  type HandlesCommand,
  type HandlesEvent,
  type MessageContext,
  type PayloadOf,
} from 'harrier';
import { decodeEnvelope } from 'harrier/extend';
import { createTestBus } from 'harrier/testing';
import { describeMessageBrokerConformance } from 'harrier/testing/conformance';
import { BullMqBroker, RedisDeadLetterStore, openRedisAdmin, type BullMqBrokerOptions } from 'harrier/redis';
import { migratePostgres } from 'harrier/postgres';
import { RabbitMqBroker } from 'harrier/rabbitmq';
import { harrierTelemetry } from 'harrier/telemetry';
import { createDashboard } from 'harrier/dashboard';
import { run } from 'harrier/cli';

const loaded: Record<string, unknown> = {
  harrier: createBus,
  'harrier/extend': decodeEnvelope,
  'harrier/testing': createTestBus,
  'harrier/testing/conformance': describeMessageBrokerConformance,
  'harrier/redis': openRedisAdmin,
  'harrier/postgres': migratePostgres,
  'harrier/rabbitmq': RabbitMqBroker,
  'harrier/telemetry': harrierTelemetry,
  'harrier/dashboard': createDashboard,
  'harrier/cli': run,
};

const PlaceOrder = defineCommand('shop.PlaceOrder', { schema: z.object({ orderId: z.string() }) });
const OrderPlaced = defineEvent('shop.OrderPlaced', { schema: z.object({ orderId: z.string() }) });

@injectable()
class Ledger {
  readonly lines: string[] = [];
  #recorded: () => void = () => undefined;
  readonly recorded = new Promise<void>((resolve) => (this.#recorded = resolve));
  record(line: string): void {
    this.lines.push(line);
    if (line.startsWith('recorded')) this.#recorded();
  }
}

@CommandHandler(PlaceOrder)
class PlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
  constructor(@inject(Ledger) private readonly ledger: Ledger) {}
  handle(order: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): void {
    this.ledger.record(\`placed \${order.orderId}\`);
    ctx.publish(OrderPlaced, { orderId: order.orderId });
  }
}

@EventHandler(OrderPlaced)
class RecordOrder implements HandlesEvent<typeof OrderPlaced> {
  constructor(@inject(Ledger) private readonly ledger: Ledger) {}
  handle(event: PayloadOf<typeof OrderPlaced>): void {
    this.ledger.record(\`recorded \${event.orderId}\`);
  }
}

async function main(): Promise<void> {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const prefix = process.env.HARRIER_PREFIX ?? '{harrier}';
  const container = new Container();
  container.bind(Ledger).toSelf().inSingletonScope();
  const options: BullMqBrokerOptions = { connection: url, prefix, logger: silentLogger };
  const broker = new BullMqBroker(options);
  const client = new Redis(url);
  const deadLetters = new RedisDeadLetterStore({ connection: client, prefix });
  const bus = createBus({
    endpoint: 'shop',
    container,
    handlers: [PlaceOrderHandler, RecordOrder],
    broker,
    deadLetters,
    logger: silentLogger,
  });
  await bus.start();
  await bus.send(PlaceOrder, { orderId: 'o-1' });
  const ledger = container.get(Ledger);
  await ledger.recorded;
  await bus.stop();
  await client.quit();
  console.log(
    JSON.stringify({
      lines: ledger.lines,
      brokerIsBullMqBroker: broker instanceof BullMqBroker,
      entryPoints: Object.fromEntries(Object.entries(loaded).map(([entry, value]) => [entry, typeof value])),
    }),
  );
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
`;

/** A tsconfig for the app with `module` set to `module` (nothing else about modules). */
function tsconfig(module: string): string {
  return JSON.stringify({
    compilerOptions: {
      target: 'ES2022',
      module,
      strict: true,
      experimentalDecorators: true,
      skipLibCheck: false,
      types: ['node'],
      outDir: `out-${module}`,
    },
    files: ['main.ts'],
  });
}

let app: string;

beforeAll(() => {
  app = mkdtempSync(join(tmpdir(), 'harrier-commonjs-'));
  writeFileSync(
    join(app, 'package.json'),
    JSON.stringify({ name: 'commonjs-app', private: true, type: 'commonjs' }),
  );
  writeFileSync(join(app, 'main.ts'), MAIN_TS);
  for (const name of LINKED) {
    mkdirSync(join(app, 'node_modules', name, '..'), { recursive: true });
    symlinkSync(join(modules, name), join(app, 'node_modules', name), 'dir');
  }
  symlinkSync(root, join(app, 'node_modules', 'harrier'), 'dir');
});

afterAll(() => {
  rmSync(app, { recursive: true, force: true });
});

describe('a CommonJS app on Harrier', () => {
  describe.each([
    { module: 'commonjs', compiler: 'TypeScript 6', tsc: TSC_6 },
    { module: 'node20', compiler: 'TypeScript 7', tsc: TSC_7 },
  ])('compiled with module: $module ($compiler)', ({ module, tsc }) => {
    it('type-checks, requires every entry point and handles a command and its event on Redis', async () => {
      writeFileSync(join(app, `tsconfig.${module}.json`), tsconfig(module));
      await ok('node', [tsc, '-p', `tsconfig.${module}.json`], app);
      // The compiled app loads Harrier with require(), not import().
      const compiled = readFileSync(join(app, `out-${module}`, 'main.js'), 'utf8');
      expect(compiled).toContain('require("harrier/redis")');
      expect(compiled).not.toContain('import(');

      const prefix = `{cjs-${randomUUID().slice(0, 8)}}`;
      const admin = new Redis(redisUrl);
      try {
        const result = await run('node', [join(`out-${module}`, 'main.js')], app, {
          REDIS_URL: redisUrl,
          HARRIER_PREFIX: prefix,
        });
        expect({ code: result.code, stderr: result.stderr }).toEqual({ code: 0, stderr: '' });
        expect(JSON.parse(result.stdout)).toEqual({
          lines: ['placed o-1', 'recorded o-1'],
          brokerIsBullMqBroker: true,
          entryPoints: Object.fromEntries(Object.keys(ENTRY_POINTS).map((entry) => [entry, 'function'])),
        });
      } finally {
        await deleteKeys(admin, prefix);
        await admin.quit();
      }
    }, 120_000);
  });

  describe('compiled with module: node16', () => {
    it('is refused by TypeScript for each ES module it imports (TS1479), Harrier and inversify alike', async () => {
      // node16 is Node 16's module system, which could not require() an ES module; node20 and
      // nodenext are the modes for require(esm) (docs/installing.md says so).
      writeFileSync(join(app, 'tsconfig.node16.json'), tsconfig('node16'));
      const result = await run('node', [TSC_7, '-p', 'tsconfig.node16.json', '--noEmit'], app);
      const errors = [...result.stdout.matchAll(/error (TS\d+): .*?import\("([^"]+)"\)/g)].map(
        ([, code, name]) => `${code ?? ''} ${name ?? ''}`,
      );
      expect(result.code).not.toBe(0);
      expect(result.stdout.match(/error TS\d+/g)?.length).toBe(errors.length);
      expect(new Set(errors)).toEqual(
        new Set(['inversify', ...Object.keys(ENTRY_POINTS)].map((name) => `TS1479 ${name}`)),
      );
    }, 60_000);
  });
});
