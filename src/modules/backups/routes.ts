/** /admin/api/backups: the automatic backups — their state and list — and one written now. */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { adminOp, d } from '../../http/docs'
import { ApiError } from '../../http/errors'
import type { Services } from '../../services'

const backupDoc = d.object({ name: d.string('The folder under CAPSTAN_BACKUP_DIR.'), created_at: d.time, complete: d.boolean, messages: d.integer, media_files: d.integer })
const stateDoc = d.object({
  database: d.oneOf(['sqlite', 'postgres'], { description: 'Where this installation keeps its data: the embedded SQLite file, which these backups copy, or PostgreSQL (CAPSTAN_DATABASE_URL), which is backed up with its own tools (pg_dump, continuous archiving) and has no backups here.' }),
  directory: d.nullable(d.string('CAPSTAN_BACKUP_DIR; null when backups are off.')),
  every_hours: d.number,
  keep: d.integer,
  state: d.oneOf(['off', 'ok', 'failed', 'overdue']),
  last_success_at: d.nullable(d.time),
  last_failure: d.nullable(d.object({ at: d.time, error: d.string() })),
  running: d.boolean,
  backups: d.list(backupDoc),
})
const tag = 'Backups'

export function backupAdminRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const backups = svc.backups
  const config = svc.deps.config
  return new Elysia()
    .use(auth)
    .get(
      '/backups',
      () => ({
        data: {
          database: config.databaseUrl ? 'postgres' : 'sqlite',
          directory: config.backupDir,
          every_hours: config.backupEveryMs / 3_600_000,
          keep: config.backupKeep,
          ...backups.status(),
          backups: backups.list(),
        },
      }),
      { admin: true, detail: adminOp({ summary: 'The automatic backups', tag, ok: { status: 200, data: stateDoc, description: 'Their settings, state and the backups kept, newest first.' } }) },
    )
    .post(
      '/backups',
      async ({ set, request, server }) => {
        if (config.databaseUrl) throw new ApiError(422, 'backups_not_configured', 'This installation keeps its data in PostgreSQL: back it up with PostgreSQL’s own tools (pg_dump, continuous archiving); Capstan’s backups copy the embedded SQLite file.')
        if (!backups.enabled) throw new ApiError(422, 'backups_not_configured', 'Set CAPSTAN_BACKUP_DIR to the directory backups go to, then restart the server.')
        // a large data directory takes longer to copy than the idle timeout lets a quiet
        // connection live: this one waits for the backup's outcome
        server?.timeout(request, 0)
        try {
          const entry = await backups.run()
          set.status = 201
          return { data: entry }
        } catch (e) {
          throw new ApiError(500, 'backup_failed', `The backup could not be written: ${(e as Error).message}`)
        }
      },
      { admin: true, detail: adminOp({ summary: 'Write a backup now', description: 'Answers when it is written (a large data directory takes a while).', tag, writes: true, ok: { status: 201, data: backupDoc, description: 'Written.' }, errors: [422, 500] }) },
    )
}
