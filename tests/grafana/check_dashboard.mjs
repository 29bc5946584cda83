// check_dashboard.mjs — checks a Grafana dashboard JSON against Grafana's own
// published schema: the Dashboard type of @grafana/schema (generated from
// Grafana's CUE kinds: the classic dashboard model Grafana imports) and, for
// each panel, the options and custom field config of its panel plugin
// (@grafana/schema's composable panelcfg types: timeseries, heatmap, stat,
// table). The JSON is written into a TypeScript file as object literals
// typed by those types and compiled with the TypeScript compiler (noEmit,
// strict): a missing required field, a field of the wrong type, a value
// outside an enumeration or a field the schema does not have (excess
// property checks) is an error naming the panel.
//
//   node tests/grafana/check_dashboard.mjs DASHBOARD.json WORKDIR
//
// Exit 0 valid, 1 invalid, 2 bad usage or input, 77 when the npm
// dependencies are not installed (npm ci --prefix tests/grafana; 1 instead
// with AA_REQUIRE_SCHEMA_CHECK=1, as CI runs it).
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const [, , dashPath, work] = process.argv;
if (!dashPath || !work) {
  console.error('usage: node check_dashboard.mjs DASHBOARD.json WORKDIR');
  process.exit(2);
}
const require = createRequire(path.join(here, 'package.json'));
let ts;
try {
  ts = require('typescript');
  require.resolve('@grafana/schema/package.json');
} catch (e) {
  // CI (.ci/run) sets AA_REQUIRE_SCHEMA_CHECK=1: there a missing install fails
  const required = process.env.AA_REQUIRE_SCHEMA_CHECK === '1';
  console.log((required ? 'FAIL' : 'SKIP') + ': the schema check needs npm ci --prefix tests/grafana (' +
              e.message.split('\n')[0] + ')');
  process.exit(required ? 1 : 77);
}
const schemaVersion = require('@grafana/schema/package.json').version;

let dash;
try {
  dash = JSON.parse(fs.readFileSync(dashPath, 'utf8'));
} catch (e) {
  console.error(`${dashPath}: ${e.message}`);
  process.exit(2);
}

// The panel plugins whose options and field config are checked too: type ->
// the module of its panelcfg types in @grafana/schema.
// the module of its panelcfg types in @grafana/schema, and whether the
// plugin has a custom field config (stat has none).
const plugins = {
  timeseries: ['timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen', true],
  heatmap: ['heatmap/panelcfg/x/HeatmapPanelCfg_types.gen', true],
  stat: ['stat/panelcfg/x/StatPanelCfg_types.gen', false],
  table: ['table/panelcfg/x/TablePanelCfg_types.gen', true],
};

const lines = [];
const where = []; // line -> what the line belongs to
const emit = (text, what) => {
  for (const l of text.split('\n')) {
    lines.push(l);
    where.push(what);
  }
};
emit(`import type { AnnotationQuery, Dashboard, DataQuery, Panel, RowPanel } from '@grafana/schema';`, 'imports');
// The Prometheus data source's query (Grafana's PromQuery: @grafana/schema
// types a panel's and an annotation's query as the data source's own,
// DataQuery plus its fields; these are the Prometheus plugin's).
emit(`interface PromQuery extends DataQuery {
  expr: string; legendFormat?: string; instant?: boolean; range?: boolean; exemplar?: boolean;
  format?: 'time_series' | 'table' | 'heatmap'; interval?: string; intervalFactor?: number;
  editorMode?: 'code' | 'builder';
}
type PromPanel = Omit<Panel, 'targets'> & { targets?: PromQuery[] };
type PromRow = Omit<RowPanel, 'panels'> & { panels: PromPanel[] };
type PromDashboard = Omit<Dashboard, 'annotations' | 'panels'> & {
  annotations?: { list?: AnnotationQuery<PromQuery>[] };
  panels?: Array<PromPanel | PromRow>;
};`, 'prelude');
for (const [kind, [mod, hasCustom]] of Object.entries(plugins)) {
  const names = hasCustom ? `Options as ${kind}Options, FieldConfig as ${kind}Custom`
                          : `Options as ${kind}Options`;
  emit(`import type { ${names} } from '@grafana/schema/dist/esm/raw/composable/${mod}';`, 'imports');
  if (!hasCustom) emit(`type ${kind}Custom = Record<string, never>;`, 'imports');
}
// String enums of the schema (LegendDisplayMode, ...) take their values as
// the JSON writes them: "list" for LegendDisplayMode.List.
emit(`type Loose<T> = T extends string ? (string extends T ? string : \`\${T}\`)
  : T extends readonly (infer U)[] ? Loose<U>[]
  : T extends object ? { [K in keyof T]: Loose<T[K]> } : T;`, 'prelude');
emit(`export const dashboard: Loose<PromDashboard> = ${JSON.stringify(dash, null, 2)};`, 'the dashboard');

const panels = [];
for (const p of dash.panels || []) {
  panels.push(p);
  for (const q of p.panels || []) panels.push(q);
}
let checked = 0;
panels.forEach((p, i) => {
  const kind = p.type;
  const what = `panel ${JSON.stringify(p.title)} (${kind})`;
  if (!(kind in plugins)) {
    if (kind !== 'row' && kind !== 'text') {
      console.error(`${what}: no schema for this panel type in the check (add it to plugins)`);
      process.exitCode = 1;
    }
    return;
  }
  emit(`export const options${i}: Loose<${kind}Options> = ${JSON.stringify(p.options ?? {}, null, 2)};`, what + ' options');
  const custom = p.fieldConfig?.defaults?.custom;
  if (custom !== undefined) {
    emit(`export const custom${i}: Loose<${kind}Custom> = ${JSON.stringify(custom, null, 2)};`, what + ' fieldConfig.defaults.custom');
  }
  checked++;
});

fs.mkdirSync(work, { recursive: true });
const file = path.join(work, 'dashboard_check.ts');
fs.writeFileSync(file, lines.join('\n') + '\n');
const options = {
  strict: true, noEmit: true, skipLibCheck: true, target: ts.ScriptTarget.ES2020,
  module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler,
  typeRoots: [], types: [], baseUrl: here,
  paths: { '@grafana/schema': [path.join(here, 'node_modules/@grafana/schema')],
           '@grafana/schema/*': [path.join(here, 'node_modules/@grafana/schema/*')] },
};
const program = ts.createProgram([file], options);
const diags = ts.getPreEmitDiagnostics(program);
for (const d of diags) {
  const msg = ts.flattenDiagnosticMessageText(d.messageText, '\n  ');
  if (d.file && d.start !== undefined) {
    const { line } = d.file.getLineAndCharacterOfPosition(d.start);
    const at = d.file.fileName === file ? `${where[line] ?? '?'}: ${lines[line]?.trim()}` : d.file.fileName;
    console.error(`INVALID ${at}\n  ${msg}`);
  } else {
    console.error(`INVALID ${msg}`);
  }
}
if (diags.length > 0 || process.exitCode) {
  console.error(`${dashPath}: ${diags.length} schema error(s) against @grafana/schema ${schemaVersion} (generated file: ${file})`);
  process.exit(1);
}
console.log(`ok: ${dashPath} is a valid Grafana dashboard (@grafana/schema ${schemaVersion}, ` +
            `typescript ${ts.version}); ${checked} panels' options checked against their plugins`);
