/**
 * CAPSTAN_* environment → one typed, validated config object.
 *
 * A bad value stops the start with one line naming the variable (ConfigError). Defaults follow
 * CONTRACT §0. A `.env` beside the binary is read by `capstan` itself (see loadDotEnv in main.ts),
 * never by Bun's compile-time autoload.
 */
import { join, resolve } from 'node:path'
import { isIpRange } from './http/ip-ranges'

export type ClamdAddress = { kind: 'unix'; path: string } | { kind: 'tcp'; host: string; port: number }

/**
 * Where media files live: the data directory (the default), or an S3-compatible bucket
 * (CAPSTAN_MEDIA_STORE=s3://bucket/prefix) reached with the usual S3_* / AWS_* variables.
 */
export type MediaStoreConfig =
  | { kind: 'local' }
  | { kind: 's3'; bucket: string; prefix: string; endpoint: string | null; region: string | null; accessKeyId: string | null; secretAccessKey: string | null; sessionToken: string | null }

export interface Config {
  host: string
  port: number
  dataDir: string
  dbPath: string
  /**
   * PostgreSQL instead of the embedded SQLite file (CAPSTAN_DATABASE_URL, postgres://…); null: the
   * SQLite file in the data directory. Holds a password: never logged or shown.
   */
  databaseUrl: string | null
  /**
   * How many connections to PostgreSQL this instance keeps at most (CAPSTAN_DATABASE_POOL). Writes
   * share transactions, so a few carry thousands of sends a second; more statements at once than
   * the server has cores only make each wait longer (see BENCHMARKS.md, the pool's size).
   */
  databasePool: number
  mediaDir: string
  mediaStore: MediaStoreConfig
  adminToken: string | null
  /** Key material for secrets stored encrypted (null: a key file, see secretKeyFile). */
  secretKey: string | null
  /** The key file: CAPSTAN_SECRET_KEY_FILE (outside the data directory), or `secret.key` in it. */
  secretKeyFile: string
  clamd: ClamdAddress
  keyRateLimit: number
  authFailLimit: number
  rateWindowMs: number
  /** Addresses/CIDR ranges of the reverse proxies in front (CAPSTAN_TRUSTED_PROXIES); empty: none. */
  trustedProxies: string[]
  logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent'
  /** Largest non-multipart request body accepted, in bytes (413 above). */
  maxJsonBytes: number
  /** Largest multipart request body accepted, in bytes (413 above). */
  maxUploadBytes: number
  /** How long clamd may take to scan one file. */
  clamdTimeoutMs: number
  /** How long a network driver may take to accept one send. */
  driverTimeoutMs: number
  /** Bearer token for GET /metrics (null: the route is not served). */
  metricsToken: string | null
  /** Where automatic backups go (null: none are made). */
  backupDir: string | null
  /** How often an automatic backup is made. */
  backupEveryMs: number
  /** How many automatic backups are kept. */
  backupKeep: number
  /** WAL checkpoints from a worker thread (false: only SQLite's automatic one, inside writes). */
  walCheckpointer: boolean
}

export class ConfigError extends Error {}

/**
 * CAPSTAN_DATABASE_URL: a postgres:// (or postgresql://) URL with a host or a socket folder
 * (`?host=/run/postgresql`) and a database name. Its value is never repeated in an error: it may
 * hold a password.
 */
function databaseUrl(env: Record<string, string | undefined>): string | null {
  const raw = env.CAPSTAN_DATABASE_URL?.trim()
  if (!raw) return null
  // libpq's list of hosts to fail over between (h1,h2): Bun's client takes one address
  const hosts = /^[a-z]+:\/\/(?:[^@/?#]*@)?([^/?#]*)/i.exec(raw)?.[1] ?? ''
  if (hosts.includes(',')) throw new ConfigError("CAPSTAN_DATABASE_URL names several hosts: Capstan reaches PostgreSQL at one address — give it the primary's, kept by a virtual IP or Patroni's HAProxy through a failover")
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new ConfigError('CAPSTAN_DATABASE_URL must be a URL such as postgres://user:password@host:5432/capstan (a password holding : / ? # or % percent-encoded: # as %23)')
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') throw new ConfigError('CAPSTAN_DATABASE_URL must start with postgres:// (unset, Capstan uses its embedded SQLite file)')
  if (!url.hostname && !url.searchParams.get('host')) throw new ConfigError('CAPSTAN_DATABASE_URL must name a host (or a socket folder with ?host=/path)')
  if (url.pathname.length <= 1) throw new ConfigError('CAPSTAN_DATABASE_URL must name a database, as in postgres://host/capstan')
  return raw
}

const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'silent'] as const

function int(env: Record<string, string | undefined>, name: string, def: number, min: number, max: number): number {
  const raw = env[name]
  if (raw === undefined || raw === '') return def
  if (!/^\d+$/.test(raw.trim())) throw new ConfigError(`${name} must be a whole number between ${min} and ${max}`)
  const n = Number(raw.trim())
  if (n < min || n > max) throw new ConfigError(`${name} must be a whole number between ${min} and ${max}`)
  return n
}

function bool(env: Record<string, string | undefined>, name: string, def: boolean): boolean {
  const raw = env[name]?.trim().toLowerCase()
  if (raw === undefined || raw === '') return def
  if (['1', 'true', 'yes', 'on'].includes(raw)) return true
  if (['0', 'false', 'no', 'off'].includes(raw)) return false
  throw new ConfigError(`${name} must be true or false`)
}

/** Parse `unix:/path` or `tcp://host:port`. */
export function parseClamd(raw: string): ClamdAddress {
  if (raw.startsWith('unix:')) {
    const path = raw.slice(5)
    if (!path) throw new ConfigError('CAPSTAN_CLAMD must be unix:/path or tcp://host:port')
    return { kind: 'unix', path }
  }
  const m = /^tcp:\/\/([^:/]+|\[[^\]]+\]):(\d{1,5})$/.exec(raw)
  if (m && Number(m[2]) > 0 && Number(m[2]) < 65536) return { kind: 'tcp', host: m[1]!.replace(/^\[|\]$/g, ''), port: Number(m[2]) }
  throw new ConfigError('CAPSTAN_CLAMD must be unix:/path or tcp://host:port')
}

/**
 * CAPSTAN_TRUSTED_PROXIES (comma-separated addresses/CIDRs), plus loopback for the older
 * CAPSTAN_TRUST_PROXY=true.
 */
function trustedProxies(env: Record<string, string | undefined>): string[] {
  const list = (env.CAPSTAN_TRUSTED_PROXIES ?? '')
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean)
  for (const r of list) if (!isIpRange(r)) throw new ConfigError('CAPSTAN_TRUSTED_PROXIES must be a comma-separated list of IP addresses or CIDR ranges')
  if (bool(env, 'CAPSTAN_TRUST_PROXY', false)) list.push('127.0.0.0/8', '::1')
  return list
}

/** Build the config from an environment map (process.env by default). Throws ConfigError. */
/** CAPSTAN_MEDIA_STORE: unset or empty → the data directory; s3://bucket[/prefix] → that bucket. */
function mediaStore(env: Record<string, string | undefined>): MediaStoreConfig {
  const raw = env.CAPSTAN_MEDIA_STORE?.trim()
  if (!raw) return { kind: 'local' }
  const m = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:\/([A-Za-z0-9!_.*'()\/-]*))?$/.exec(raw)
  if (!m) throw new ConfigError('CAPSTAN_MEDIA_STORE must be s3://bucket or s3://bucket/prefix (a bucket name of 3-63 lower-case letters, digits, dots and hyphens)')
  const prefix = (m[2] ?? '').replace(/^\/+|\/+$/g, '')
  const first = (...names: string[]) => names.map((n) => env[n]?.trim()).find((v) => v) ?? null
  const endpoint = first('S3_ENDPOINT', 'AWS_ENDPOINT', 'AWS_ENDPOINT_URL_S3', 'AWS_ENDPOINT_URL')
  if (endpoint !== null && !/^https?:\/\/[^\s/]+\/?$/.test(endpoint)) throw new ConfigError('S3_ENDPOINT must be an http:// or https:// address (scheme, host and port only)')
  return {
    kind: 's3',
    bucket: m[1]!,
    prefix: prefix ? `${prefix}/` : '',
    endpoint,
    region: first('S3_REGION', 'AWS_REGION', 'AWS_DEFAULT_REGION'),
    accessKeyId: first('S3_ACCESS_KEY_ID', 'AWS_ACCESS_KEY_ID'),
    secretAccessKey: first('S3_SECRET_ACCESS_KEY', 'AWS_SECRET_ACCESS_KEY'),
    sessionToken: first('S3_SESSION_TOKEN', 'AWS_SESSION_TOKEN'),
  }
}

export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const dataDir = resolve(env.CAPSTAN_DATA_DIR || './data')
  const logLevel = (env.CAPSTAN_LOG_LEVEL || 'info').trim().toLowerCase()
  if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) {
    throw new ConfigError(`CAPSTAN_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}`)
  }
  const host = (env.CAPSTAN_HOST || '0.0.0.0').trim()
  if (!/^[A-Za-z0-9.:\-[\]]+$/.test(host)) throw new ConfigError('CAPSTAN_HOST must be a host name or IP address')
  const adminToken = env.CAPSTAN_ADMIN_TOKEN?.trim() || null
  if (adminToken !== null && adminToken.length < 16) throw new ConfigError('CAPSTAN_ADMIN_TOKEN must be at least 16 characters')
  const metricsToken = env.CAPSTAN_METRICS_TOKEN?.trim() || null
  if (metricsToken !== null && metricsToken.length < 16) throw new ConfigError('CAPSTAN_METRICS_TOKEN must be at least 16 characters')
  const backupRaw = env.CAPSTAN_BACKUP_DIR?.trim() || null
  const backupDir = backupRaw === null ? null : resolve(backupRaw)
  if (backupDir !== null && (backupDir === dataDir || backupDir.startsWith(`${dataDir}/`))) throw new ConfigError('CAPSTAN_BACKUP_DIR must be outside CAPSTAN_DATA_DIR')
  const secretKey = env.CAPSTAN_SECRET_KEY?.trim()
  if (secretKey && secretKey.length < 32) throw new ConfigError('CAPSTAN_SECRET_KEY must be at least 32 characters')
  const keyFileRaw = env.CAPSTAN_SECRET_KEY_FILE?.trim() || null
  const secretKeyFile = keyFileRaw === null ? join(dataDir, 'secret.key') : resolve(keyFileRaw)
  if (keyFileRaw !== null && (secretKeyFile.startsWith(`${dataDir}/`) || secretKeyFile === dataDir)) throw new ConfigError('CAPSTAN_SECRET_KEY_FILE must be outside CAPSTAN_DATA_DIR (there, backups would carry it)')
  if (keyFileRaw !== null && secretKey) throw new ConfigError('set CAPSTAN_SECRET_KEY or CAPSTAN_SECRET_KEY_FILE, not both')
  if (backupDir !== null && env.CAPSTAN_DATABASE_URL?.trim()) throw new ConfigError('CAPSTAN_BACKUP_DIR backs up the embedded SQLite file; with CAPSTAN_DATABASE_URL back up PostgreSQL itself (pg_dump, or continuous archiving for point-in-time recovery)')
  return {
    host,
    port: int(env, 'CAPSTAN_PORT', 8080, 0, 65535),
    dataDir,
    dbPath: join(dataDir, 'capstan.db'),
    databaseUrl: databaseUrl(env),
    databasePool: int(env, 'CAPSTAN_DATABASE_POOL', 4, 1, 100),
    mediaDir: join(dataDir, 'media'),
    mediaStore: mediaStore(env),
    adminToken,
    secretKey: env.CAPSTAN_SECRET_KEY?.trim() || null,
    secretKeyFile,
    clamd: parseClamd((env.CAPSTAN_CLAMD || 'unix:/var/run/clamav/clamd.ctl').trim()),
    keyRateLimit: int(env, 'CAPSTAN_KEY_RATE_LIMIT', 60, 1, 10_000_000),
    authFailLimit: int(env, 'CAPSTAN_AUTH_FAIL_LIMIT', 120, 1, 10_000_000),
    rateWindowMs: int(env, 'CAPSTAN_RATE_WINDOW_SECONDS', 60, 1, 86_400) * 1000,
    trustedProxies: trustedProxies(env),
    logLevel: logLevel as Config['logLevel'],
    maxJsonBytes: int(env, 'CAPSTAN_MAX_JSON_BYTES', 1024 * 1024, 1024, 64 * 1024 * 1024),
    maxUploadBytes: int(env, 'CAPSTAN_MAX_UPLOAD_BYTES', 64 * 1024 * 1024, 1024, 1024 * 1024 * 1024),
    clamdTimeoutMs: int(env, 'CAPSTAN_CLAMD_TIMEOUT_MS', 30_000, 100, 600_000),
    driverTimeoutMs: int(env, 'CAPSTAN_DRIVER_TIMEOUT_MS', 60_000, 100, 600_000),
    metricsToken,
    backupDir,
    backupEveryMs: int(env, 'CAPSTAN_BACKUP_HOURS', 24, 1, 720) * 3_600_000,
    backupKeep: int(env, 'CAPSTAN_BACKUP_KEEP', 7, 1, 100),
    walCheckpointer: bool(env, 'CAPSTAN_WAL_CHECKPOINTER', true),
  }
}
