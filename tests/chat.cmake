# Chat templates against the real templates rendered by jinja2, and the sampler.
add_executable(render_template tools/render_template.cpp)
target_link_libraries(render_template PRIVATE ptxlm_engine nlohmann_json::nlohmann_json)
ptxlm_gtest(test_chat_template test_chat_template.cpp LIBS ptxlm_engine SANITIZE)
ptxlm_gtest(test_sampler test_sampler.cpp LIBS ptxlm_engine TIMEOUT 120 SANITIZE)
ptxlm_pytest(chat_templates_vs_jinja2 check_templates.py ARGS $<TARGET_FILE:render_template> TIMEOUT 300)
# The Jinja interpreter: unit cases, and llama.cpp's real templates against jinja2.
add_executable(jinja_render tools/jinja_render.cpp)
target_link_libraries(jinja_render PRIVATE ptxlm_engine nlohmann_json::nlohmann_json)
ptxlm_gtest(test_jinja test_jinja.cpp LIBS ptxlm_engine TIMEOUT 120 SANITIZE)
ptxlm_pytest(jinja_vs_jinja2 check_jinja.py ARGS $<TARGET_FILE:jinja_render> TIMEOUT 120)
