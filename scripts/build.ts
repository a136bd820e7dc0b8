/**
 * `npm run build` (`tsx scripts/build.ts [outDir]`): compiles src/ into dist/, or into `outDir`, as
 * the package ships it beside src/:
 *
 * - JavaScript without comments, and source maps whose `sources` are `../src/….ts` relative paths
 *   inside the package, with one mapping per original line ({@link lineMappings}) and no inlined
 *   sources: `node --enable-source-maps` and debuggers open the shipped src/ files;
 * - declarations with their TSDoc, in a second pass that only emits (the first one type-checked).
 *
 * Together with src/ this packs to about half the size of maps that inline every source.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { lineMappings } from './line-mappings.js';

const root = join(import.meta.dirname, '..');
const srcDir = join(root, 'src');
const tsc = join(root, 'node_modules', '@typescript', 'native', 'bin', 'tsc');

/** What a source map of tsc has and what the package's keeps. */
interface SourceMap {
  readonly version: number;
  readonly file: string;
  readonly sourceRoot?: string;
  readonly sources: readonly string[];
  readonly names: readonly string[];
  readonly mappings: string;
}

function compile(config: string, outDir: string): void {
  const result = spawnSync(process.execPath, [tsc, '-p', join(root, config), '--outDir', outDir], {
    stdio: 'inherit',
  });
  if (result.status !== 0) {
    throw new Error(`tsc -p ${config} failed (exit ${String(result.status ?? result.signal)})`);
  }
}

/** A path of the package, with `/` whatever the platform. */
function posix(path: string): string {
  return path.split(sep).join('/');
}

/**
 * The map at `path` (under `outDir`) as the package ships it: each source named by its path relative
 * to the map inside the package (`dist/<dir>/` -> `src/<dir>/`), whatever `outDir` was.
 */
function packageSourceMap(map: SourceMap, path: string, outDir: string): SourceMap {
  const inPackage = join('dist', relative(outDir, dirname(path)));
  const sources = map.sources.map((source) => {
    const fromSrc = relative(srcDir, resolve(dirname(path), map.sourceRoot ?? '', source));
    if (fromSrc.startsWith('..')) throw new Error(`${path} maps a file outside src/: ${source}`);
    return posix(relative(inPackage, join('src', fromSrc)));
  });
  return {
    version: map.version,
    file: map.file,
    sourceRoot: '',
    sources,
    names: [],
    mappings: lineMappings(map.mappings),
  };
}

const outDir = resolve(process.argv[2] ?? join(root, 'dist'));
compile('tsconfig.build.json', outDir);
compile('tsconfig.types.json', outDir);
for (const entry of readdirSync(outDir, { recursive: true, withFileTypes: true })) {
  if (!entry.isFile() || !entry.name.endsWith('.js.map')) continue;
  const path = join(entry.parentPath, entry.name);
  const map = JSON.parse(readFileSync(path, 'utf8')) as SourceMap;
  writeFileSync(path, JSON.stringify(packageSourceMap(map, path, outDir)));
}
chmodSync(join(outDir, 'cli', 'bin.js'), 0o755);
