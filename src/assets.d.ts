// Files embedded with text imports (`with { type: 'text' }`).
declare module '*.sql' {
  const text: string
  export default text
}
declare module 'swagger-ui-dist/swagger-ui-bundle.js' {
  const text: string
  export default text
}
declare module 'swagger-ui-dist/swagger-ui.css' {
  const text: string
  export default text
}
declare module '*.html' {
  const text: string
  export default text
}
declare module '*.css' {
  const text: string
  export default text
}
declare module '*.svg' {
  const text: string
  export default text
}
