// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/**
 * The layers of DESIGN.md, lowest first: a folder of src/ may import from its own layer and the layers
 * below it, never from a layer above (types included). Folders of one layer may import each other.
 */
const LAYERS = [
  ['errors', 'clock', 'logging'],
  ['messages'],
  ['broker', 'log'],
  ['handlers'],
  ['dispatch', 'projections', 'dead-letters', 'sagas', 'telemetry'],
  ['admin'],
  ['bus'],
  ['dashboard'],
  ['testing', 'redis', 'postgres', 'rabbitmq'],
  ['nestjs'],
  ['cli'],
];

/** The CLI's own restriction: Redis classes only through loadRedisLayer(). */
const CLI_LAZY_REDIS = {
  regex: '^\\.\\./redis/(?!load-redis-layer\\.js$|redis-errors\\.js$)',
  allowTypeImports: true,
  message:
    'The CLI takes Redis classes from loadRedisLayer(), so that --help works without bullmq and ioredis.',
};

/** The CLI's own restriction: PostgreSQL functions only through loadPostgresLayer(). */
const CLI_LAZY_POSTGRES = {
  regex: '^\\.\\./postgres/(?!load-postgres-layer\\.js$|postgres-connection\\.js$)',
  allowTypeImports: true,
  message: 'The CLI takes PostgreSQL functions from loadPostgresLayer(), so that --help works without pg.',
};

/** The CLI's own restriction: OpenTelemetry (an optional peer) only through loadGlobalTracing(). */
const CLI_LAZY_TELEMETRY = {
  regex: '^(\\.\\./)+telemetry/(?!load-tracing\\.js$)',
  allowTypeImports: true,
  message:
    'The CLI takes tracing from loadGlobalTracing(), so that it runs without @opentelemetry/api (an optional peer).',
};

/** Packages only one folder may import (DESIGN.md layers), for `no-restricted-imports` paths. */
const NO_BULLMQ = { name: 'bullmq', message: 'Only src/redis may import bullmq (DESIGN.md layers).' };
const NO_IOREDIS = { name: 'ioredis', message: 'Only src/redis may import ioredis (DESIGN.md layers).' };
const NO_PG = { name: 'pg', message: 'Only src/postgres may import pg (DESIGN.md layers).' };
const NO_AMQPLIB = {
  name: 'amqplib',
  message: 'Only src/rabbitmq may import amqplib (DESIGN.md layers).',
};
const NO_INVERSIFY = {
  name: 'inversify',
  message: 'Nothing below src/bus knows inversify (DESIGN.md layers).',
};

/** Only src/telemetry may import OpenTelemetry: it is an optional peer, loaded only by "./telemetry". */
const NO_OTEL = {
  group: ['@opentelemetry/*'],
  message: 'Only src/telemetry may import @opentelemetry packages (an optional peer; docs/telemetry.md).',
};

/** Only src/nestjs may import Nest: optional peers, loaded only by "./nestjs" (docs/nestjs.md). */
const NO_NEST = {
  group: ['@nestjs/*'],
  message:
    'Only src/nestjs may import @nestjs packages (optional peers, loaded only by "./nestjs"; DESIGN.md layers).',
};

/**
 * The `no-restricted-imports` rule for `paths`, with OpenTelemetry unless `otel` is allowed, and Nest
 * unless `nest` is allowed.
 */
function restrictImports(paths, otel = true, nest = false) {
  const patterns = [...(otel ? [NO_OTEL] : []), ...(nest ? [] : [NO_NEST])];
  return { 'no-restricted-imports': ['error', { patterns, paths }] };
}

/**
 * A driver folder takes its driver's values from its peers module (required synchronously there, so
 * that its entry point loads under `require(esm)` and a missing driver names its install), never
 * from a static import; types come from `import type` as usual.
 */
const PEERS_MODULE = {
  redis: [
    ['bullmq', 'redis-peers.ts'],
    ['ioredis', 'redis-peers.ts'],
  ],
  postgres: [['pg', 'postgres-peers.ts']],
  rabbitmq: [['amqplib', 'rabbitmq-peers.ts']],
};

/** zod's values come through the module that checks its version first (zod 3 fails at load otherwise). */
const ZOD_MODULE = 'src/messages/supported-zod.ts';
const ZOD_THROUGH_CHECK = {
  name: 'zod',
  allowTypeImports: true,
  message: `Take z from ${ZOD_MODULE}, which checks that the installed zod is zod 4; import zod's types with \`import type\`.`,
};

/** The `paths` of `@typescript-eslint/no-restricted-imports` for a folder: its peers, and zod. */
function restrictedPaths(folder) {
  const peers = (PEERS_MODULE[folder] ?? []).map(([name, module]) => ({
    name,
    allowTypeImports: true,
    message: `Take ${name}'s values from src/${folder}/${module} (a static import would break require() of the entry point); import its types with \`import type\`.`,
  }));
  return [...peers, ZOD_THROUGH_CHECK];
}

/** The `patterns` of `@typescript-eslint/no-restricted-imports` for the folders of `LAYERS[index]`. */
function layerPatterns(index) {
  const layer = LAYERS[index];
  const above = LAYERS.slice(index + 1).flat();
  const patterns =
    above.length === 0
      ? []
      : [
          {
            regex: `^(\\.\\./)+(${above.join('|')})/`,
            message: `src/${layer.join(', src/')} may import only from its own layer and those below it (DESIGN.md layers; docs/architecture.md).`,
          },
        ];
  if (layer.includes('cli')) patterns.push(CLI_LAZY_REDIS, CLI_LAZY_POSTGRES, CLI_LAZY_TELEMETRY);
  return patterns;
}

/** One config block per folder: its files may not import a folder of a higher layer. */
const layerOrder = LAYERS.flatMap((layer, index) =>
  layer.map((folder) => ({
    files: [`src/${folder}/**/*.ts`],
    ignores: [ZOD_MODULE],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        { patterns: layerPatterns(index), paths: restrictedPaths(folder) },
      ],
    },
  })),
);

/** The zod check itself imports zod. */
const zodModule = {
  files: [ZOD_MODULE],
  rules: {
    '@typescript-eslint/no-restricted-imports': [
      'error',
      { patterns: layerPatterns(LAYERS.findIndex((layer) => layer.includes('messages'))) },
    ],
  },
};

export default tseslint.config(
  { ignores: ['dist/**', '.bench/**', 'node_modules/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: true,
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/restrict-template-expressions': [
        'error',
        { allowNumber: true, allowBoolean: true },
      ],
      '@typescript-eslint/no-extraneous-class': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-invalid-void-type': 'off',
      '@typescript-eslint/no-unnecessary-type-parameters': 'off',
      'no-restricted-imports': 'off',
    },
  },
  {
    files: ['src/**/*.ts'],
    ignores: ['src/redis/**', 'src/telemetry/**', 'src/nestjs/**'],
    rules: restrictImports([NO_BULLMQ, NO_IOREDIS, NO_PG, NO_AMQPLIB]),
  },
  {
    files: ['src/nestjs/**/*.ts'],
    rules: restrictImports(
      [NO_BULLMQ, NO_IOREDIS, NO_INVERSIFY, NO_PG, NO_AMQPLIB],
      true,
      true /* src/nestjs may import Nest */,
    ),
  },
  {
    files: ['src/postgres/**/*.ts'],
    rules: restrictImports([NO_BULLMQ, NO_IOREDIS, NO_AMQPLIB]),
  },
  {
    files: ['src/redis/**/*.ts'],
    rules: restrictImports([NO_PG, NO_AMQPLIB]),
  },
  {
    files: ['src/rabbitmq/**/*.ts'],
    rules: restrictImports([NO_BULLMQ, NO_IOREDIS, NO_PG]),
  },
  ...layerOrder,
  zodModule,
  {
    files: [
      'src/messages/**/*.ts',
      'src/broker/**/*.ts',
      'src/log/**/*.ts',
      'src/handlers/**/*.ts',
      'src/dispatch/**/*.ts',
      'src/projections/**/*.ts',
      'src/dead-letters/**/*.ts',
      'src/sagas/**/*.ts',
      'src/admin/**/*.ts',
    ],
    rules: restrictImports([NO_BULLMQ, NO_IOREDIS, NO_INVERSIFY, NO_PG, NO_AMQPLIB]),
  },
  {
    files: ['src/telemetry/**/*.ts'],
    rules: restrictImports(
      [NO_BULLMQ, NO_IOREDIS, NO_INVERSIFY, NO_PG, NO_AMQPLIB],
      false /* src/telemetry may import OpenTelemetry */,
    ),
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts', 'examples/**/*.ts'],
    rules: {
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/require-await': 'off',
    },
  },
  {
    files: ['**/*.js'],
    ...tseslint.configs.disableTypeChecked,
  },
);
