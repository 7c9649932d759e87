/** /admin/api/backups: the automatic backups — their state and list — and one written now. */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { hidden } from '../../http/docs'
import { ApiError } from '../../http/errors'
import type { Services } from '../../services'

export function backupAdminRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const backups = svc.backups
  const config = svc.deps.config
  return new Elysia()
    .use(auth)
    .get(
      '/backups',
      () => ({
        data: {
          directory: config.backupDir,
          every_hours: config.backupEveryMs / 3_600_000,
          keep: config.backupKeep,
          ...backups.status(),
          backups: backups.list(),
        },
      }),
      { admin: true, detail: hidden },
    )
    .post(
      '/backups',
      async ({ set, request, server }) => {
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
      { admin: true, detail: hidden },
    )
}
