/**
 * Harrier as someone else's app gets it: the package is built and packed as `npm pack` would publish
 * it, installed from the tarball into new apps in a temp dir (offline, from the npm cache the repo
 * was installed from), and a decorated app is type-checked against it and run, CLI included. One app
 * has every peer dependency and vitest, and runs the conformance suites from
 * harrier/testing/conformance; the other has no bullmq, ioredis nor vitest, and tests with
 * createTestBus from harrier/testing under node:test.
 *
 * The package is staged in the temp dir (package.json, README, LICENSE, the `files` entries, and a
 * dist/ that scripts/build.ts compiles there) instead of packing the repo, whose prepack would delete
 * the dist/ that other test files run the CLI from.
 */
import { randomUUID } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { deleteKeys } from '../helpers/redis.js';
import { ok, run, type Run } from '../helpers/run-command.js';

const redisUrl = inject('redisUrl');
const root = join(import.meta.dirname, '..', '..');
const tsc = join(root, 'node_modules', '@typescript', 'native', 'bin', 'tsc');
const tsx = join(root, 'node_modules', '.bin', 'tsx');

/** What the tarball may weigh (as `npm pack` reports its size): docs/installing.md#what-the-package-contains. */
const MAX_PACKED_BYTES = 1_500_000;

/** The version of a package the repo has installed, so that the npm cache has it. */
function installed(name: string): string {
  const manifest = JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')) as {
    version: string;
  };
  return manifest.version;
}

const rootPackage = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  name: string;
  version: string;
  files: string[];
  peerDependencies: Record<string, string>;
};

/** The in-memory app: decorated handlers, an injected service, a command that publishes an event. */
const MAIN_TS = `import { Container, inject, injectable } from 'inversify';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  HarrierTokens,
  createBus,
  defineCommand,
  defineEvent,
  silentLogger,
  type HandlesCommand,
  type HandlesEvent,
  type MessageContext,
  type PayloadOf,
} from 'harrier';

const PlaceOrder = defineCommand('shop.PlaceOrder', {
  schema: z.object({ orderId: z.string(), total: z.number().positive() }),
});
const OrderPlaced = defineEvent('shop.OrderPlaced', {
  schema: z.object({ orderId: z.string(), total: z.number() }),
});

@injectable()
class Ledger {
  readonly lines: string[] = [];
  #recorded: () => void = () => undefined;
  readonly recorded = new Promise<void>((resolve) => (this.#recorded = resolve));
  record(line: string): void {
    this.lines.push(line);
    this.#recorded();
  }
}

@CommandHandler(PlaceOrder)
class PlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
  constructor(@inject(Ledger) private readonly ledger: Ledger) {}
  handle(order: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): void {
    const total: number = order.total;
    this.ledger.lines.push(\`placed \${order.orderId}\`);
    ctx.publish(OrderPlaced, { orderId: order.orderId, total });
  }
}

@EventHandler(OrderPlaced)
class RecordOrder implements HandlesEvent<typeof OrderPlaced> {
  constructor(
    @inject(Ledger) private readonly ledger: Ledger,
    @inject(HarrierTokens.MessageContext) private readonly ctx: MessageContext,
  ) {}
  handle(event: PayloadOf<typeof OrderPlaced>): void {
    this.ledger.record(\`recorded \${event.orderId} \${event.total} from \${this.ctx.envelope.type}\`);
  }
}

const container = new Container();
container.bind(Ledger).toSelf().inSingletonScope();
const bus = createBus({
  endpoint: 'shop',
  container,
  handlers: [PlaceOrderHandler, RecordOrder],
  logger: silentLogger,
});
await bus.start();
await bus.send(PlaceOrder, { orderId: 'o-1', total: 42 });
const ledger = container.get(Ledger);
await ledger.recorded;
await bus.stop();
console.log(JSON.stringify(ledger.lines));
`;

/** The same kind of app on Redis through harrier/redis: one command that is dead-lettered at once. */
const REDIS_TS = `import { z } from 'zod';
import { CommandHandler, UnrecoverableError, createBus, defineCommand, silentLogger } from 'harrier';
import { BullMqBroker, RedisDeadLetterStore, type BullMqBrokerOptions } from 'harrier/redis';

const ChargeCard = defineCommand('shop.ChargeCard', { schema: z.object({ orderId: z.string() }) });

@CommandHandler(ChargeCard)
class ChargeCardHandler {
  handle(): void {
    throw new UnrecoverableError('card declined');
  }
}

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = process.env.HARRIER_PREFIX ?? '{harrier}';
const options: BullMqBrokerOptions = { connection: url, prefix, logger: silentLogger };
const broker: BullMqBroker = new BullMqBroker(options);
const deadLetters: RedisDeadLetterStore = new RedisDeadLetterStore({ connection: url, prefix });
const bus = createBus({ endpoint: 'shop', handlers: [ChargeCardHandler], broker, deadLetters, logger: silentLogger });
await bus.start();
await bus.send(ChargeCard, { orderId: 'o-2' });
const deadline = Date.now() + 20_000;
while ((await deadLetters.count()) === 0) {
  if (Date.now() > deadline) throw new Error('no dead letter within 20 s');
  await new Promise((resolve) => setTimeout(resolve, 50));
}
console.log(JSON.stringify({ deadLetters: await deadLetters.count() }));
await bus.stop();
`;

/** createBus given a Container from a second copy of inversify. */
const FOREIGN_MJS = `import { HarrierError, createBus } from 'harrier';
const { Container } = await import(new URL('./other/node_modules/inversify/lib/index.js', import.meta.url).href);
try {
  createBus({ container: new Container() });
  console.log(JSON.stringify({ created: true }));
} catch (error) {
  console.log(JSON.stringify({ harrier: HarrierError.is(error), name: error.name, code: error.code, message: error.message }));
}
`;

/** What `require()` of an entry point gives a CommonJS app: whether it loaded, else the error. */
const REQUIRE_CJS = `const outcome = {};
for (const entry of process.argv.slice(2)) {
  try {
    require(entry);
    outcome[entry] = { loaded: true };
  } catch (error) {
    outcome[entry] = { name: error.name, code: error.code, message: error.message };
  }
}
console.log(JSON.stringify(outcome));
`;

/** The same from an ES module, with \`import()\`. */
const IMPORT_MJS = `const outcome = {};
for (const entry of process.argv.slice(2)) {
  try {
    await import(entry);
    outcome[entry] = { loaded: true };
  } catch (error) {
    outcome[entry] = { name: error.name, code: error.code, message: error.message };
  }
}
console.log(JSON.stringify(outcome));
`;

/** A node:test file on harrier/testing, in plain JavaScript (decorators applied as functions). */
const TEST_BUS_TEST_MJS = `import assert from 'node:assert/strict';
import test from 'node:test';
import { z } from 'zod';
import { CommandHandler, defineCommand, defineEvent } from 'harrier';
import { createTestBus } from 'harrier/testing';

const PlaceOrder = defineCommand('shop.PlaceOrder', { schema: z.object({ orderId: z.string() }) });
const OrderPlaced = defineEvent('shop.OrderPlaced', { schema: z.object({ orderId: z.string() }) });

class PlaceOrderHandler {
  handle(order, ctx) {
    ctx.publish(OrderPlaced, { orderId: order.orderId });
  }
}
CommandHandler(PlaceOrder)(PlaceOrderHandler);

test('vitest cannot be resolved from this app', async () => {
  await assert.rejects(import('vitest'), { code: 'ERR_MODULE_NOT_FOUND' });
});

test('createTestBus handles a command and captures the event it publishes', async () => {
  const bus = await createTestBus({ handlers: [PlaceOrderHandler], definitions: [OrderPlaced] });
  await bus.send(PlaceOrder, { orderId: 'o-1' });
  await bus.whenIdle();
  assert.deepEqual(bus.messagesOf(OrderPlaced).map((m) => m.payload), [{ orderId: 'o-1' }]);
  await bus.stop();
});
`;

/** The conformance suites from harrier/testing/conformance, run by vitest on the in-memory stores. */
const CONFORMANCE_TEST_MJS = `import { InMemoryCheckpointStore, InMemoryDeadLetterStore } from 'harrier';
import {
  describeCheckpointStoreConformance,
  describeDeadLetterStoreConformance,
} from 'harrier/testing/conformance';

describeCheckpointStoreConformance('InMemoryCheckpointStore', async () => ({ store: new InMemoryCheckpointStore() }));
describeDeadLetterStoreConformance('InMemoryDeadLetterStore', async () => ({ store: new InMemoryDeadLetterStore() }));
`;

/** An error thrown inside the installed package, printed with its stack. */
const THROW_MJS = `import { z } from 'zod';
import { defineCommand } from 'harrier';

try {
  defineCommand('not a type!', { schema: z.object({}) });
} catch (error) {
  console.log(JSON.stringify({ code: error.code, stack: error.stack }));
}
`;

/** What an implementer type-checks against: the contract from harrier, its helpers from harrier/extend. */
const EXTEND_TS = `import type { MessageBroker } from 'harrier';
import { decodeEnvelope, parseAttemptHistory, type Delivery } from 'harrier/extend';
import { describeMessageBrokerConformance } from 'harrier/testing/conformance';

export type Receiver = MessageBroker['receiver'];
export const first: Delivery['facts']['attempt'] = 1;
export const helpers = [decodeEnvelope, parseAttemptHistory, describeMessageBrokerConformance].map((fn) => typeof fn);
`;

function tsconfig(files: readonly string[]): string {
  return JSON.stringify({
    compilerOptions: {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      strict: true,
      experimentalDecorators: true,
      skipLibCheck: false,
      types: ['node'],
      outDir: 'out',
    },
    files,
  });
}

/** Makes an app in `dir` that depends on the tarball and on `peers`, and installs it offline. */
async function installApp(dir: string, tarball: string, peers: readonly string[]): Promise<Run> {
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify({
      name: 'packed-app',
      private: true,
      type: 'module',
      dependencies: {
        harrier: `file:${tarball}`,
        ...Object.fromEntries(peers.map((name) => [name, installed(name)])),
      },
      devDependencies: { '@types/node': installed('@types/node') },
    }),
  );
  // From the cache the repo's own install filled (package metadata it lacks from the registry). No
  // scripts: Harrier has
  // none, and bullmq's optional native msgpackr build is not what this test is about.
  return ok('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts'], dir);
}

/** Relative links of a markdown text (path and #anchor), outside code blocks. */
function relativeLinks(markdown: string): { path: string; anchor: string | undefined }[] {
  return [...markdown.replace(/```[\s\S]*?```/g, '').matchAll(/\]\(([^)\s]+)\)/g)]
    .map((match) => match[1] ?? '')
    .filter((target) => !/^[a-z]+:/i.test(target))
    .map((target) => {
      const [path = '', anchor] = target.split('#');
      return { path, anchor };
    });
}

/** The anchors of a markdown page's headings, as GitHub and npm make them. */
function anchorsOf(markdown: string): Set<string> {
  const headings = [...markdown.replace(/```[\s\S]*?```/g, '').matchAll(/^#{1,6} (.+)$/gm)];
  return new Set(
    headings.map((match) =>
      (match[1] ?? '')
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\s_-]/gu, '')
        .replace(/ /g, '-'),
    ),
  );
}

let work: string;
let stage: string;
let packedFiles: string[];
let packedBytes: number;
let full: string;
let bare: string;
let fullInstall: Run;
/** A directory with zod 3 in its node_modules. */
let zod3: string;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'harrier-packed-'));
  stage = join(work, 'package');
  mkdirSync(stage);
  // `files` entries starting with ! are exclusions, which npm pack applies to what is staged.
  for (const entry of ['package.json', 'README.md', 'LICENSE', ...rootPackage.files]) {
    if (entry !== 'dist' && !entry.startsWith('!')) {
      cpSync(join(root, entry), join(stage, entry), { recursive: true });
    }
  }
  await ok(tsx, [join(root, 'scripts', 'build.ts'), join(stage, 'dist')], root);
  const packed = await ok('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', work], stage);
  const [info] = JSON.parse(packed.stdout) as { filename: string; size: number; files: { path: string }[] }[];
  if (info === undefined) throw new Error(`npm pack printed no package: ${packed.stdout}`);
  packedFiles = info.files.map((file) => file.path);
  packedBytes = info.size;
  const tarball = join(work, info.filename);

  full = join(work, 'app-full');
  bare = join(work, 'app-bare');
  zod3 = join(work, 'zod3');
  mkdirSync(zod3);
  writeFileSync(join(zod3, 'package.json'), JSON.stringify({ name: 'zod3', private: true }));
  [fullInstall] = await Promise.all([
    installApp(full, tarball, ['inversify', 'zod', 'reflect-metadata', 'bullmq', 'ioredis', 'vitest']),
    installApp(bare, tarball, ['inversify', 'zod', 'reflect-metadata']),
    ok('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', 'zod@3'], zod3),
  ]);
  for (const [dir, files] of [
    [full, ['main.ts', 'redis.ts', 'extend.ts']],
    [bare, ['main.ts']],
  ] as const) {
    writeFileSync(join(dir, 'main.ts'), MAIN_TS);
    writeFileSync(join(dir, 'redis.ts'), REDIS_TS);
    writeFileSync(join(dir, 'foreign.mjs'), FOREIGN_MJS);
    writeFileSync(join(dir, 'throw.mjs'), THROW_MJS);
    writeFileSync(join(dir, 'require.cjs'), REQUIRE_CJS);
    writeFileSync(join(dir, 'import.mjs'), IMPORT_MJS);
    writeFileSync(join(dir, 'extend.ts'), EXTEND_TS);
    writeFileSync(join(dir, 'test-bus.test.mjs'), TEST_BUS_TEST_MJS);
    writeFileSync(join(dir, 'conformance.test.mjs'), CONFORMANCE_TEST_MJS);
    writeFileSync(join(dir, 'tsconfig.json'), tsconfig(files));
  }
}, 600_000);

afterAll(() => {
  rmSync(work, { recursive: true, force: true });
});

describe('the packed package', () => {
  it(`weighs at most ${String(MAX_PACKED_BYTES / 1_000_000)} MB packed`, () => {
    expect(packedBytes).toBeLessThanOrEqual(MAX_PACKED_BYTES);
  });

  it('ships LICENSE, README, docs, dist and src, and neither declaration maps nor screenshots', () => {
    expect(packedFiles).toEqual(
      expect.arrayContaining([
        'LICENSE',
        'README.md',
        'package.json',
        'docs/redis.md',
        'docs/dashboard.md',
        'docs/images/trace.svg',
        'src/index.ts',
        'src/redis/index.ts',
        'dist/index.js',
        'dist/index.d.ts',
        'dist/redis/index.js',
        'dist/extend.js',
        'dist/extend.d.ts',
        'dist/testing/index.js',
        'dist/testing/conformance.js',
        'dist/cli/bin.js',
      ]),
    );
    expect(packedFiles.filter((path) => path.endsWith('.d.ts.map') || path.endsWith('.png'))).toEqual([]);
    expect(readFileSync(join(stage, 'LICENSE'), 'utf8')).toMatch(
      /^MIT License\n\nCopyright \(c\) \d{4} Harrier contributors/,
    );
  });

  it('has a source map beside every script, naming the src/ files of the package it was built from', () => {
    const scripts = packedFiles.filter((path) => path.endsWith('.js'));
    expect(scripts.length).toBeGreaterThan(10);
    const unmapped: string[] = [];
    for (const script of scripts) {
      if (!packedFiles.includes(`${script}.map`)) {
        unmapped.push(`${script}: no map`);
        continue;
      }
      const map = JSON.parse(readFileSync(join(stage, `${script}.map`), 'utf8')) as {
        sourceRoot?: string;
        sources: string[];
        sourcesContent?: unknown;
      };
      const sources = map.sources.map((source) =>
        normalize(join(dirname(script), map.sourceRoot ?? '', source)).replaceAll('\\', '/'),
      );
      if (sources.length !== 1 || !sources.every((source) => packedFiles.includes(source))) {
        unmapped.push(`${script}: ${sources.join(', ')}`);
      }
      if (map.sourcesContent !== undefined) unmapped.push(`${script}: inlines its sources`);
    }
    expect(unmapped).toEqual([]);
  });

  it('has README and docs links that resolve to files and headings inside it (screenshots: in the repository)', () => {
    const broken: string[] = [];
    for (const page of packedFiles.filter((path) => path.endsWith('.md'))) {
      for (const { path, anchor } of relativeLinks(readFileSync(join(stage, page), 'utf8'))) {
        const target = path === '' ? page : normalize(join(dirname(page), path)).replaceAll('\\', '/');
        if (target.startsWith('docs/images/') && target.endsWith('.png')) {
          if (!existsSync(join(root, target))) broken.push(`${page} -> ${path}`);
        } else if (!packedFiles.includes(target)) broken.push(`${page} -> ${path}`);
        else if (
          anchor !== undefined &&
          target.endsWith('.md') &&
          !anchorsOf(readFileSync(join(stage, target), 'utf8')).has(anchor)
        ) {
          broken.push(`${page} -> ${path}#${anchor}`);
        }
      }
    }
    expect(broken).toEqual([]);
  });
});

describe('npm install of the tarball', () => {
  it('prints no EBADENGINE warning', () => {
    expect(fullInstall.stderr).not.toContain('EBADENGINE');
  });

  it('installs one copy of inversify and of @inversifyjs/core, shared with the app', () => {
    expect(existsSync(join(full, 'node_modules', '@inversifyjs', 'core'))).toBe(true);
    expect(existsSync(join(full, 'node_modules', 'harrier', 'node_modules'))).toBe(false);
    expect(existsSync(join(full, 'node_modules', 'inversify', 'node_modules'))).toBe(false);
  });

  it('leaves out bullmq, ioredis, amqplib and vitest when the app does not ask for them', () => {
    expect(existsSync(join(bare, 'node_modules', 'bullmq'))).toBe(false);
    expect(existsSync(join(bare, 'node_modules', 'ioredis'))).toBe(false);
    expect(existsSync(join(bare, 'node_modules', 'amqplib'))).toBe(false);
    expect(existsSync(join(bare, 'node_modules', 'vitest'))).toBe(false);
  });
});

describe('a decorated app on the installed package', () => {
  describe('with every peer dependency', () => {
    it('type-checks against the installed declarations (harrier, harrier/redis, harrier/extend, harrier/testing/conformance)', async () => {
      await ok('node', [tsc, '-p', 'tsconfig.json'], full);
    }, 120_000);

    it('sends a command, handles it and publishes an event, in memory', async () => {
      const result = await ok('node', ['out/main.js'], full);
      expect(JSON.parse(result.stdout)).toEqual(['placed o-1', 'recorded o-1 42 from shop.OrderPlaced']);
    });

    it('dead-letters a command on Redis through harrier/redis, and harrier dlq list --json shows it', async () => {
      const prefix = `{packed-${randomUUID().slice(0, 8)}}`;
      const admin = new Redis(redisUrl);
      try {
        const app = await run('node', ['out/redis.js'], full, {
          REDIS_URL: redisUrl,
          HARRIER_PREFIX: prefix,
        });
        expect(app.stderr).toBe('');
        expect(JSON.parse(app.stdout)).toEqual({ deadLetters: 1 });
        const cli = await run(
          join(full, 'node_modules', '.bin', 'harrier'),
          ['dlq', 'list', '--json', '--redis-url', redisUrl, '--prefix', prefix],
          full,
        );
        expect(cli.code).toBe(0);
        const lines = cli.stdout
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line) as Record<string, unknown>);
        expect(lines).toMatchObject([
          { type: 'shop.ChargeCard', reason: 'handler-failed', endpoint: 'shop' },
        ]);
      } finally {
        await deleteKeys(admin, prefix);
        await admin.quit();
      }
    }, 60_000);

    it('maps an error thrown inside the package to its src/ file and line under node --enable-source-maps', async () => {
      const result = await ok('node', ['--enable-source-maps', 'throw.mjs'], full);
      const { code, stack } = JSON.parse(result.stdout) as { code: string; stack: string };
      expect(code).toBe('invalid-definition');
      // Node names a mapped frame's file by its path, an unmapped one by its file: URL.
      const frames = [...stack.matchAll(/^ {4}at .*\((\S+):(\d+):\d+\)$/gm)].map(([, file = '', line]) => ({
        path: file.startsWith('file:') ? fileURLToPath(file) : file,
        line: Number(line),
      }));
      const [thrower, caller] = frames;
      expect(relative(join(full, 'node_modules', 'harrier'), thrower?.path ?? '')).toMatch(/^src\/.+\.ts$/);
      expect(relative(join(full, 'node_modules', 'harrier'), caller?.path ?? '')).toMatch(/^src\/.+\.ts$/);
      const source = readFileSync(thrower?.path ?? '', 'utf8').split('\n');
      expect(source[(thrower?.line ?? 0) - 1]).toContain('throw new HarrierError(');
    });

    it('prints the CLI help with npx harrier --help, and dlq list --help', async () => {
      const help = await run('npx', ['--no', '--', 'harrier', '--help'], full);
      expect(help).toMatchObject({
        code: 0,
        stdout: expect.stringContaining('Usage: harrier <command>') as unknown,
      });
      const list = await run(join(full, 'node_modules', '.bin', 'harrier'), ['dlq', 'list', '--help'], full);
      expect(list).toMatchObject({
        code: 0,
        stdout: expect.stringContaining('Usage: harrier dlq list') as unknown,
      });
    });
  });

  describe('with vitest', () => {
    it('runs the conformance suites of harrier/testing/conformance', async () => {
      const result = await run(
        join(full, 'node_modules', '.bin', 'vitest'),
        ['run', 'conformance.test.mjs'],
        full,
        { NO_COLOR: '1' },
      );
      expect({ code: result.code, output: result.stdout + result.stderr }).toMatchObject({ code: 0 });
      expect(result.stdout).toMatch(/Test Files +1 passed \(1\)/);
      expect(result.stdout).toMatch(/Tests +\d+ passed/);
    }, 120_000);
  });

  describe('when the container comes from a second copy of inversify', () => {
    it('createBus throws foreign-container naming the inversify range to install', async () => {
      mkdirSync(join(full, 'other', 'node_modules'), { recursive: true });
      cpSync(join(full, 'node_modules', 'inversify'), join(full, 'other', 'node_modules', 'inversify'), {
        recursive: true,
      });
      cpSync(
        join(full, 'node_modules', '@inversifyjs'),
        join(full, 'other', 'node_modules', '@inversifyjs'),
        {
          recursive: true,
        },
      );
      const result = await ok('node', ['foreign.mjs'], full);
      const outcome = JSON.parse(result.stdout) as Record<string, unknown>;
      expect(outcome).toMatchObject({ harrier: true, code: 'foreign-container' });
      expect(outcome.message).toContain(`npm install inversify@${rootPackage.peerDependencies.inversify}`);
    });
  });

  describe('when Harrier resolves a second copy of @inversifyjs/core', () => {
    it('still resolves handlers that inject the message context', async () => {
      const own = join(full, 'node_modules', 'harrier', 'node_modules', '@inversifyjs', 'core');
      cpSync(join(full, 'node_modules', '@inversifyjs', 'core'), own, { recursive: true });
      try {
        const result = await ok('node', ['out/main.js'], full);
        expect(JSON.parse(result.stdout)).toEqual(['placed o-1', 'recorded o-1 42 from shop.OrderPlaced']);
      } finally {
        rmSync(join(full, 'node_modules', 'harrier', 'node_modules'), { recursive: true, force: true });
      }
    });
  });

  describe('when Harrier resolves zod 3 (an install forced past the peer range)', () => {
    it('fails to load with missing-dependency naming npm install zod@^4, from import and from require', async () => {
      const own = join(full, 'node_modules', 'harrier', 'node_modules', 'zod');
      cpSync(join(zod3, 'node_modules', 'zod'), own, { recursive: true });
      try {
        const expected = {
          harrier: {
            name: 'HarrierError',
            code: 'missing-dependency',
            message: expect.stringContaining('npm install zod@^4') as unknown,
          },
        };
        expect(JSON.parse((await ok('node', ['import.mjs', 'harrier'], full)).stdout)).toMatchObject(
          expected,
        );
        expect(JSON.parse((await ok('node', ['require.cjs', 'harrier'], full)).stdout)).toMatchObject(
          expected,
        );
      } finally {
        rmSync(join(full, 'node_modules', 'harrier', 'node_modules'), { recursive: true, force: true });
      }
    });
  });

  describe('without bullmq and ioredis', () => {
    it('type-checks and runs the in-memory app', async () => {
      await ok('node', [tsc, '-p', 'tsconfig.json'], bare);
      const result = await ok('node', ['out/main.js'], bare);
      expect(JSON.parse(result.stdout)).toEqual(['placed o-1', 'recorded o-1 42 from shop.OrderPlaced']);
    }, 120_000);

    it('prints the help of harrier and of every command', async () => {
      const harrier = join(bare, 'node_modules', '.bin', 'harrier');
      for (const args of [
        ['--help'],
        ['dlq', '--help'],
        ...['list', 'show', 'groups', 'replay', 'purge', 'export', 'import'].map((sub) => [
          'dlq',
          sub,
          '--help',
        ]),
        ['projections', '--help'],
        ['projections', 'status', '--help'],
        ['projections', 'rebuild', '--help'],
        ['topology', '--help'],
      ]) {
        const result = await run(harrier, args, bare);
        expect({ args, code: result.code, stderr: result.stderr }).toEqual({ args, code: 0, stderr: '' });
        expect(result.stdout).toMatch(/^Usage: harrier/);
      }
    }, 60_000);

    it('exits non-zero from a command that needs Redis, saying npm install bullmq ioredis', async () => {
      const harrier = join(bare, 'node_modules', '.bin', 'harrier');
      for (const args of [['dlq', 'list', '--json'], ['projections', 'status'], ['topology']]) {
        const result = await run(harrier, [...args, '--redis-url', redisUrl], bare);
        expect(result.code).not.toBe(0);
        expect(result.stderr).toContain('npm install bullmq ioredis');
        expect(result.stderr).not.toContain('ERR_MODULE_NOT_FOUND');
      }
    }, 60_000);

    it('runs a node:test file that uses createTestBus from harrier/testing, without vitest installed', async () => {
      const result = await run('node', ['--test', 'test-bus.test.mjs'], bare);
      expect({ code: result.code, output: result.stdout + result.stderr }).toMatchObject({ code: 0 });
      expect(result.stdout).toMatch(/# pass 2/);
      expect(result.stdout).toMatch(/# fail 0/);
    }, 60_000);

    it('throws missing-dependency from require("harrier/redis") and, without pg and amqplib, require("harrier/postgres") and require("harrier/rabbitmq")', async () => {
      const result = await ok(
        'node',
        ['require.cjs', 'harrier', 'harrier/redis', 'harrier/postgres', 'harrier/rabbitmq'],
        bare,
      );
      expect(JSON.parse(result.stdout)).toMatchObject({
        harrier: { loaded: true },
        'harrier/redis': {
          name: 'HarrierError',
          code: 'missing-dependency',
          message: expect.stringContaining('npm install bullmq ioredis') as unknown,
        },
        'harrier/postgres': {
          name: 'HarrierError',
          code: 'missing-dependency',
          message: expect.stringContaining('npm install pg') as unknown,
        },
        'harrier/rabbitmq': {
          name: 'HarrierError',
          code: 'missing-dependency',
          message: expect.stringContaining('npm install amqplib') as unknown,
        },
      });
    });

    it('rejects import("harrier/redis") and import("harrier/rabbitmq") with missing-dependency saying npm install bullmq ioredis, npm install amqplib', async () => {
      const result = await ok('node', ['import.mjs', 'harrier/redis', 'harrier/rabbitmq'], bare);
      expect(JSON.parse(result.stdout)).toMatchObject({
        'harrier/redis': {
          name: 'HarrierError',
          code: 'missing-dependency',
          message: expect.stringContaining('npm install bullmq ioredis') as unknown,
        },
        'harrier/rabbitmq': {
          name: 'HarrierError',
          code: 'missing-dependency',
          message: expect.stringContaining('npm install amqplib') as unknown,
        },
      });
    });
  });
});
