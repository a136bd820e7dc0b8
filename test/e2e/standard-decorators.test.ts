import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
const tsc = join(root, 'node_modules', '@typescript', 'native', 'bin', 'tsc');

/** The tsconfig of an app that left experimentalDecorators out: TypeScript emits standard decorators. */
const tsconfig = {
  compilerOptions: {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    strict: true,
    skipLibCheck: true,
    types: [],
    rootDir: '.',
    outDir: 'out',
  },
  files: ['app.ts'],
};

const header = `
import { z } from 'zod';
import { CommandHandler, On, Projection, createBus, defineCommand, defineEvent } from 'harrier';
const PlaceOrder = defineCommand('shop.PlaceOrder', { schema: z.object({ orderId: z.string() }) });
const OrderPlaced = defineEvent('shop.OrderPlaced', { schema: z.object({ orderId: z.string() }) });
void PlaceOrder;
void OrderPlaced;
void On;
void Projection;
void CommandHandler;
`;

let dir: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'harrier-tc39-'));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
  writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify(tsconfig));
  mkdirSync(join(dir, 'node_modules'));
  // The app imports the built package (dist/, which the global setup builds) as an app would.
  symlinkSync(root, join(dir, 'node_modules', 'harrier'), 'dir');
  symlinkSync(join(root, 'node_modules', 'zod'), join(dir, 'node_modules', 'zod'), 'dir');
});

afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** Compiles app.ts with the repo's TypeScript (`--noCheck` transpiles only, as tsx and esbuild do). */
function compile(source: string, ...flags: string[]): { status: number | null; output: string } {
  writeFileSync(join(dir, 'app.ts'), header + source);
  const result = spawnSync(process.execPath, [tsc, '-p', dir, ...flags], { encoding: 'utf8' });
  return { status: result.status, output: result.stdout + result.stderr };
}

function run(): { status: number | null; stderr: string; stdout: string } {
  const result = spawnSync(process.execPath, [join(dir, 'out', 'app.js')], { encoding: 'utf8', cwd: dir });
  return { status: result.status, stderr: result.stderr, stdout: result.stdout };
}

describe('handler decorators compiled without experimentalDecorators', () => {
  describe('when a class is decorated with @CommandHandler', () => {
    it('type-checks, then throws unsupported-decorators at decoration time naming the tsconfig flag', () => {
      const compiled = compile(`
@CommandHandler(PlaceOrder)
class PlaceOrderHandler {
  handle(payload: { orderId: string }): void {
    void payload;
  }
}
console.log('started', createBus({ handlers: [PlaceOrderHandler] }).endpoint);
`);
      expect(compiled.output).toBe('');
      expect(compiled.status).toBe(0);

      const result = run();

      expect(result.status).toBe(1);
      expect(result.stdout).not.toContain('started');
      expect(result.stderr).toContain(
        '@CommandHandler on class PlaceOrderHandler was compiled as a standard (TC39) decorator',
      );
      expect(result.stderr).toContain('"experimentalDecorators": true');
      expect(result.stderr).toContain("code: 'unsupported-decorators'");
    });
  });

  describe('when a projection method is decorated with @On and type checks are skipped', () => {
    it('throws unsupported-decorators naming @On and the tsconfig flag, not a missing @On', () => {
      const compiled = compile(
        `
@Projection('totals')
class Totals {
  @On(OrderPlaced)
  onPlaced(payload: { orderId: string }): void {
    void payload;
  }
}
console.log('started', createBus({ handlers: [Totals] }).endpoint);
`,
        '--noCheck',
      );
      expect(compiled.status).toBe(0);

      const result = run();

      expect(result.status).toBe(1);
      expect(result.stderr).toContain('@On on method onPlaced was compiled as a standard (TC39) decorator');
      expect(result.stderr).toContain('"experimentalDecorators": true');
      expect(result.stderr).not.toContain('has no @On(Event) methods');
    });
  });
});
