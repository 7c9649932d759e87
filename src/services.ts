/** Every service, built once from the deps; routes, the scheduler and the CLI share them. */
import type { Deps } from './deps'
import type { Logger } from './http/log'
import { ContactService } from './modules/contacts/service'
import { KeyService } from './modules/keys/service'
import { SuppressionService } from './modules/suppressions/service'
import { WorkspaceService } from './modules/workspaces/service'

export interface Services {
  deps: Deps
  log: Logger
  workspaces: WorkspaceService
  keys: KeyService
  contacts: ContactService
  suppressions: SuppressionService
}

export function buildServices(deps: Deps, log: Logger): Services {
  const workspaces = new WorkspaceService(deps)
  return {
    deps,
    log,
    workspaces,
    keys: new KeyService(deps, workspaces),
    contacts: new ContactService(deps),
    suppressions: new SuppressionService(deps),
  }
}
