// Swagger UI over the service's own OpenAPI document, from the vendored bundle: nothing is loaded from elsewhere
// (no validator badge either, which would call validator.swagger.io).
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
  persistAuthorization: false,
  layout: "BaseLayout",
  presets: [SwaggerUIBundle.presets.apis],
});
